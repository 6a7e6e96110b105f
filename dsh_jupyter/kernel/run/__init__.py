"""Runs: the runtime (``runtime``), one prepared kernel (``session``), one program watched
until it settles (``watch``), the host's end of its tool calls (``bridge``), its output
(``logs``, ``displays``) and files (``files``, ``remote_files``), the pool of fresh
kernels (``pool``), stateful sessions (``stateful``), and the private directories
kernels run in (``workspace``, ``removal``, ``fontcache``)."""
