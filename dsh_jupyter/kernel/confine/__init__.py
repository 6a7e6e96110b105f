"""Confinement of local kernels: the sandbox's settings (``sandbox``), the plan the host
builds for each kernel (``plan``, with the syscall filter of ``seccomp``), resource caps
(``caps``), the walls this machine may lack (``walls``), and the steps a process takes to
become a confined kernel (``_confine``: standard library only, loaded by path in the fork
server and the keeper, never imported by the host)."""
