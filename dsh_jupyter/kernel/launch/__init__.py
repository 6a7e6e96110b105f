"""Where kernels come from: the launcher seam (``base``: :class:`~.base.KernelLauncher`
starts kernels, :class:`~.base.KernelProcess` is one), the fork server (``forkserver``,
the host's end; ``_forkserver``, the server), the stock jupyter-client launch (``stock``,
with ``_keeper``, the parent of a local kernel), kernels on a gateway (``gateway``), and
the process trees of local kernels (``proctree``)."""
