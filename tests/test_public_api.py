"""The public surface: sorted __all__, every name importable, nothing at import time."""

from __future__ import annotations

import subprocess
import sys

import dsh_jupyter


def test_all_is_sorted_and_complete() -> None:
    assert dsh_jupyter.__all__ == sorted(dsh_jupyter.__all__)
    for name in dsh_jupyter.__all__:
        assert hasattr(dsh_jupyter, name), name


def test_spec_names_exist() -> None:
    expected = {"ToolRegistry", "define_tool", "ToolCall", "AbortController", "Allow", "Deny",
                "Ask", "Accept", "Block", "AgentScope", "ToolResult", "DshError"}
    assert expected <= set(dsh_jupyter.__all__)


def test_import_has_no_side_effects() -> None:
    code = (
        "import sys, threading, dsh_jupyter\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "assert 'ipywidgets' not in sys.modules, 'widgets imported at import time'\n"
        "assert 'jupyter_client' not in sys.modules, 'kernel client imported at import time'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
