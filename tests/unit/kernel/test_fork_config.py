"""The fork server's child turns its kernel options into a traitlets Config (no
command-line parser in each start): ``_forkserver.kernel_config``."""

from __future__ import annotations

import importlib.util
import types

from traitlets.config.loader import DeferredConfigString

from dsh_jupyter.kernel.launch import forkserver
from dsh_jupyter.kernel.launch.base import KERNEL_ARGS


def _server_module() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("_forkserver_under_test",
                                                  forkserver.SERVER_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kernel_options_become_a_config() -> None:
    config = _server_module().kernel_config(["-f", "/proc/self/fd/7", *KERNEL_ARGS])
    assert config.IPKernelApp.connection_file == "/proc/self/fd/7"
    assert config.HistoryManager.enabled == DeferredConfigString("False")
    assert config.IPKernelApp.quiet == DeferredConfigString("True")


def test_anything_else_is_left_to_the_command_line() -> None:
    kernel_config = _server_module().kernel_config
    for argv in (["--debug"], ["-f"], ["--quiet=True"], ["x"], ["--A.b"], ["--A.1=2"]):
        assert kernel_config(argv) is None, argv
