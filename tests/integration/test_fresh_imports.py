"""Importing the package in a fresh interpreter: nothing starts, nothing heavy loads, and
what an extra adds is missed only where it is used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)


# Importing these (or anything they import) at `import dsh_jupyter` time is the bug.
HEAVY = ("jupyter_client", "zmq", "ipykernel", "ipywidgets", "jsonschema", "httpx",
         "nbformat", "IPython", "comm", "traitlets", "mcp", "opentelemetry")


# pydantic and what it imports itself.
ALLOWED_THIRD_PARTY = {"pydantic", "pydantic_core", "typing_extensions",
                       "typing_inspection", "annotated_types"}


def test_import_has_no_side_effects() -> None:
    code = (
        "import sys, threading, dsh_jupyter\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "assert 'ipywidgets' not in sys.modules, 'widgets imported at import time'\n"
        "assert 'jupyter_client' not in sys.modules, 'kernel client imported at import time'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_loads_nothing_heavier_than_pydantic() -> None:
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import dsh_jupyter\n"
        "print(json.dumps(sorted({m.partition('.')[0] for m in set(sys.modules) - before})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True)
    loaded = set(json.loads(done.stdout))
    assert sorted(loaded & set(HEAVY)) == []
    third_party = {m for m in loaded - set(sys.stdlib_module_names) - {"dsh_jupyter"}
                   if not m.startswith("_")}
    assert third_party <= ALLOWED_THIRD_PARTY, sorted(third_party - ALLOWED_THIRD_PARTY)
    assert "pydantic" in loaded  # the scan sees third-party modules at all


def test_import_starts_nothing_and_skips_heavy_modules() -> None:
    probe = ("import sys, dsh_jupyter.cli, dsh_jupyter.evaluation, dsh_jupyter.evaluation.report; "
             "print(sorted(m for m in ('papermill', 'matplotlib', 'pandas', "
             "'dsh_jupyter.kernel', 'dsh_jupyter.testing') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=50, check=True)
    assert done.stdout.strip() == "[]"


def test_the_core_runs_without_the_client_packages() -> None:
    # A fresh interpreter where importing openai or anthropic fails, as without the extras.
    program = textwrap.dedent("""
        import asyncio, sys
        sys.modules["openai"] = sys.modules["anthropic"] = None
        from dsh_jupyter import ToolRegistry
        from dsh_jupyter.agent import (AnthropicChatModel, ModelConfigError, OpenAIChatModel,
                                       ScriptedModel, run_agent)
        result = asyncio.run(run_agent(ToolRegistry(), ScriptedModel([{"content": "ok"}]), "hi"))
        assert result.answer == "ok", result
        for adapter in (OpenAIChatModel, AnthropicChatModel):
            try:
                adapter(model="m")
            except ModelConfigError as error:
                print(error)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "OpenAIChatModel needs the openai package: pip install 'dsh-jupyter[openai]'",
        "AnthropicChatModel needs the anthropic package: pip install 'dsh-jupyter[anthropic]'"]
