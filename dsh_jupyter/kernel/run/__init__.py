"""Runs: the runtime (``runtime``), one prepared kernel (``live_kernel``), one program watched
until it settles (``watch``), the host's end of its tool calls (``call_server``), its output
(``logs``, ``displays``) and files (``files``, ``remote_files``), the pool of fresh
kernels (``pool``), stateful sessions (``stateful``), and the private directories
kernels run in (``workspace``, ``removal``, ``fontcache``)."""
