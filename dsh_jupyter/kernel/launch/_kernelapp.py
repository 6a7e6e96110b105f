"""A forked kernel's ``IPKernelApp``: what of its start survives a fork is built once in the
fork server, before any fork (:func:`prepare`); each child finishes the rest (:func:`finish`).

Loaded by path by the fork server (standard library, traitlets, IPython and ipykernel; nothing
of dsh-jupyter). ipykernel's own start (``IPKernelApp.initialize``) is two kinds of work:

- the same in every kernel, and safe to fork: the configured application and its
  ``Session``, the ``IPythonKernel`` object, and its ``ZMQInteractiveShell`` with the magics,
  prefilters, formatters, completer, display hooks and extensions (~40 traitlets objects and
  their observers, compiled patterns). The server builds these in :func:`prepare`; each child
  gets its own copy with its memory. Nothing runs in them before the fork: no program, no
  startup file, no thread, no zmq context, no event loop;
- what each kernel must have for itself: its identities (the session's id, the kernel's
  ``ident``, the key from its connection info, which signs its messages), its profile
  directory (under its own ``IPYTHONDIR``), the zmq context, sockets, streams and threads,
  its paths and environment, its startup files. :func:`finish` does these in the child,
  in ``IPKernelApp.initialize``'s order, once the child is confined and has its working
  directory and environment.

ipykernel's own steps run in the child, on the prepared objects: its ``init_kernel``
makes the streams and starts the threads, then asks ``kernel_class.instance(...)`` for the
kernel, which hands it the prepared one given those streams (:func:`_adopted`); the
kernel's constructor, in the server, got the prepared shell the same way (the shell
class's instance). What the server could only fill in with placeholders (its working
directory, ``/``, for the IPython directory, an empty profile directory) :func:`finish`
replaces with the kernel's own, with the other values read from the child's environment
and working directory (``starting_dir``, ``home_dir``, the directory history behind
``_dh``, the history file's name, the shell's environment variables).

A prepared kernel serves no heartbeat: the connection info (with its key) never leaves the
host, which does not ping it (it watches the kernel's process); the channel cost a zmq
context and a thread per kernel.

:func:`prepare` answers ``None`` for an ipykernel whose start it does not know (not 7.x),
a debugger that could be loaded, or options that are not a plain ``Config``
(:func:`kernel_config`); the child then starts the usual way (:func:`build`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KNOWN_IPYKERNEL_MAJOR = 7
"""The ipykernel whose ``IPKernelApp.initialize`` :func:`finish` follows, step by step."""
PLACEHOLDER_DIR = "/"
"""The prepared shell's IPython directory until a child gives it its own: one that exists
(setting the trait creates a missing one)."""


@dataclass(slots=True, kw_only=True)
class Prepared:
    """The application, kernel and shell built in the fork server for the kernel options
    ``argv``."""

    argv: tuple[str, ...]
    app: Any
    kernel: Any
    shell: Any


def kernel_config(argv: list[str]) -> Any:
    """The traitlets ``Config`` that ``argv`` stands for when it holds only ``-f FILE`` and
    ``--Class.trait=value`` options (values resolved as the command line's are, by each
    trait, when the app loads them); ``None`` for anything else."""
    from traitlets.config import Config
    from traitlets.config.loader import DeferredConfigString

    config = Config()
    rest = list(argv)
    while rest:
        option = rest.pop(0)
        if option == "-f" and rest:
            config.IPKernelApp.connection_file = rest.pop(0)
            continue
        name, equals, value = option.removeprefix("--").partition("=")
        owner, dot, trait = name.partition(".")
        if not (option.startswith("--") and equals and dot and owner.isidentifier()
                and trait.isidentifier()):
            return None
        config[owner][trait] = DeferredConfigString(value)
    return config


def _application(config: Any) -> Any:
    """An ``IPKernelApp`` holding ``config``: traitlets' command-line parser (an argparse
    parser over every configurable class) has nothing to do, nor has the search for config
    files in the kernel's fresh HOME."""
    from ipykernel.kernelapp import IPKernelApp

    app: Any = IPKernelApp.instance(config=config)
    app.parse_command_line = lambda argv=None: None
    app.load_config_file = lambda *args, **kwargs: None
    return app


def build(argv: list[str]) -> Any:
    """In the child, the usual way: an initialized ``IPKernelApp`` for ``argv`` (what the
    server prepared, for other options, is left aside)."""
    _forget_singletons()
    config = kernel_config(argv)
    if config is None:
        from ipykernel.kernelapp import IPKernelApp

        stock: Any = IPKernelApp.instance()
        stock.initialize(argv)
        return stock
    app = _application(config)
    app.initialize([])
    return app


def prepare(argv: list[str]) -> Prepared | None:
    """In the fork server, before any fork: the application for the kernel options ``argv``
    (without ``-f``), its kernel and shell, built as far as a fork allows (see the module
    docstring). ``None`` (and no singleton left behind) where this is not possible."""
    import ipykernel

    if getattr(ipykernel, "version_info", (0,))[0] != KNOWN_IPYKERNEL_MAJOR:
        return None
    config = kernel_config(list(argv))
    if config is None:
        return None
    try:
        return _prepare(tuple(argv), config)
    except (Exception, SystemExit):  # traitlets exits on a bad config: the server must not
        _forget_singletons()
        return None


def _prepare(argv: tuple[str, ...], config: Any) -> Prepared | None:
    from ipykernel.debugger import _is_debugpy_available
    from IPython.core.profiledir import ProfileDir

    if _is_debugpy_available:  # the server hides debugpy: a debugger is a kernel's own
        return None
    app = _application(config)
    app.init_pdb()  # IPython's interruptible pdb, patched into the pdb module
    kernel_class = app.kernel_class
    traits = kernel_class.class_traits()
    placeholder = ProfileDir()  # no location: nothing is created
    # The shell first, as IPythonKernel.__init__ asks for it but with a placeholder for the
    # IPython directory (its default, the server's HOME, would be created).
    shell = traits["shell_class"].default().instance(
        parent=app, ipython_dir=PLACEHOLDER_DIR, profile_dir=placeholder, user_module=None,
        user_ns=None, kernel=None, compiler_class=traits["compiler_class"].default())
    # The kernel gets that shell (the class's instance); its streams, sockets and threads
    # are the child's (see _adopted).
    kernel = kernel_class.instance(parent=app, session=app.session, log=app.log,
                                   profile_dir=placeholder, user_ns=app.user_ns)
    if kernel.shell is not shell:
        raise RuntimeError("the kernel did not take the prepared shell")
    shell.parent = shell.kernel = kernel
    # The shell said it wants to be told at exit; the server's exit is not a kernel's.
    atexit.unregister(shell.atexit_operations)
    app.shell = shell
    app.init_extensions()  # storemagic, as every kernel loads it
    return Prepared(argv=argv, app=app, kernel=kernel, shell=shell)


def _forget_singletons() -> None:
    """After a failed :func:`prepare`, or in a child started the usual way: ipykernel's
    lookups (``instance()``, the comm manager) find nothing prepared, and build their own."""
    with contextlib.suppress(Exception):
        from ipykernel import ipkernel
        from ipykernel.kernelapp import IPKernelApp
        from ipykernel.zmqshell import ZMQInteractiveShell

        for singleton in (IPKernelApp, ipkernel.IPythonKernel, ZMQInteractiveShell):
            singleton.clear_instance()
        ipkernel._comm_manager = None


def finish(prepared: Prepared, connection_file: str) -> Any:
    """In the child (confined, in its working directory, with its environment): the rest of
    ``IPKernelApp.initialize`` on the prepared application, less the heartbeat; returns it,
    ready to start."""
    from jupyter_client.session import new_id

    app, kernel, shell = prepared.app, prepared.kernel, prepared.shell
    # The kernel's identities (the key is the connection file's): nothing of the server's.
    app.session.session = new_id()
    app.session.pid = os.getpid()
    kernel.ident = str(uuid.uuid4())
    app.connection_file = connection_file
    # BaseIPythonApplication.initialize: the command line and config files hold nothing.
    app.init_crash_handler()
    app.init_profile_dir()
    app.init_config_files()
    # IPKernelApp.initialize, in its order (init_pdb was the server's).
    app.init_blackhole()
    app.init_connection_file()
    app.init_poller()
    app.init_sockets()
    # no init_heartbeat (see the module docstring)
    app.write_connection_file()
    app.log_connection_info()
    app.init_io()
    app.init_signal()
    _adopt(shell, app)
    with _adopted(kernel, shell):
        app.init_kernel()
    app.init_path()
    app.init_shell()
    app.init_gui_pylab()
    # init_extensions was the server's
    app.init_code()  # this kernel's startup files
    sys.stdout.flush()
    sys.stderr.flush()
    return app


def _adopt(shell: Any, app: Any) -> None:
    """The shell's values that come from where the kernel runs, as its own ``__init__``
    would have read them in this process."""
    from IPython.utils.path import get_home_dir

    shell.ipython_dir = app.ipython_dir
    shell.profile_dir = app.profile_dir
    shell.starting_dir = os.getcwd()
    shell.home_dir = get_home_dir()
    history = shell.history_manager
    history.dir_hist[:] = [Path.cwd()]  # the namespace's _dh
    history.hist_file = Path(app.profile_dir.location) / "history.sqlite"
    shell.init_environment()  # TERM, PAGER and co. in the kernel's environment
    atexit.register(shell.atexit_operations)


@contextlib.contextmanager
def _adopted(kernel: Any, shell: Any) -> Iterator[None]:
    """While ``IPKernelApp.init_kernel`` runs: its ``kernel_class.instance(**given)`` hands
    it the prepared kernel, given what the constructor would have been (the streams,
    sockets and threads it made), and does what the constructors do with them."""
    kernel_class = type(kernel)
    own = vars(kernel_class).get("instance")

    def instance(**given: Any) -> Any:
        for name, value in given.items():
            if name != "parent":  # the application, already
                setattr(kernel, name, value)
        kernel._stdout, kernel._stderr = sys.stdout, sys.stderr  # init_io's streams
        for hook in (shell.displayhook, shell.display_pub):
            hook.session = kernel.session
            hook.pub_socket = kernel.iopub_socket
        shell.displayhook.topic = kernel._topic("execute_result")
        session_name = os.environ.get("JPY_SESSION_NAME")
        if session_name:
            shell.user_ns["__session__"] = session_name
        return kernel

    kernel_class.instance = instance
    try:
        yield
    finally:
        if own is None:
            del kernel_class.instance
        else:
            kernel_class.instance = own
