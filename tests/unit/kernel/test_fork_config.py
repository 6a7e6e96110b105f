"""The fork server turns its kernels' options into a traitlets Config (no command-line
parser in each start): ``_kernelapp.kernel_config``."""

from __future__ import annotations

import importlib.util
import sys
import types

from traitlets.config.loader import DeferredConfigString

from dsh_jupyter.kernel.launch import forkserver
from dsh_jupyter.kernel.launch.base import KERNEL_ARGS


def _kernelapp_module() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("_kernelapp_under_test",
                                                  forkserver.KERNELAPP_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as the fork server loads it (_child.load)
    spec.loader.exec_module(module)
    return module


def test_the_kernel_options_become_a_config() -> None:
    config = _kernelapp_module().kernel_config(["-f", "/proc/self/fd/7", *KERNEL_ARGS])
    assert config.IPKernelApp.connection_file == "/proc/self/fd/7"
    assert config.HistoryManager.enabled == DeferredConfigString("False")
    assert config.IPKernelApp.quiet == DeferredConfigString("True")


def test_anything_else_is_left_to_the_command_line() -> None:
    kernel_config = _kernelapp_module().kernel_config
    for argv in (["--debug"], ["-f"], ["--quiet=True"], ["x"], ["--A.b"], ["--A.1=2"]):
        assert kernel_config(argv) is None, argv
