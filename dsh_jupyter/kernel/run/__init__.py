"""Runs: the runtime (``runtime``) and where a run's kernel comes from (``sources``: fresh
kernels, from the pool of ``pool`` or started cold; a conversation's kept one,
``stateful``), one live kernel (``live_kernel``), one program watched until it settles
(``watch``) through the run's lifecycle (``lifecycle``, which ``inprocess`` runs in the
host's process too), the host's end of its tool calls (``call_server``), its output
(``logs``, ``displays``) and files (``files``, ``remote_files``), and the private
directories kernels run in (``workspace``, ``removal``, ``fontcache``)."""
