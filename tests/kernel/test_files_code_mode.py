"""Run files through ``registry.execute(run_code)`` on a real kernel: what the model reads
(value and content), where the bytes go (attachments), what the session log keeps (meta
with capped base64) and what the card shows; the prompt names inputs only when there are
some."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.codemode.run_files import CARD_FILE_BYTES, FILES_HEADING
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.extension import RunCodeOutcome
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.registry.results import ToolSuccess
from dsh_jupyter.testing import InProcessRuntime
from dsh_jupyter.widgets import RunCodeCard
from dsh_jupyter.widgets.presenting import durable_from_event

pytestmark = [pytest.mark.timeout(60), pytest.mark.kernel]

PROGRAM = """
import os
os.makedirs('outputs/tables')
open('outputs/report.txt', 'w').write('total: 3\\n<b>bold</b>\\n')
open('outputs/tables/big.bin', 'wb').write(b'\\0' * 200_000)
open('outputs/huge.bin', 'wb').write(b'x' * 2_000_000)
print(open('inputs/data.csv').read().splitlines()[0])
return 3
"""


async def test_run_code_returns_files_to_the_user_not_the_model(tmp_path: Path) -> None:
    table = tmp_path / "data.csv"
    table.write_text("a,b\n1,2\n")
    config = KernelRuntimeConfig(pool_size=0, inputs={"data.csv": table},
                                 max_output_file_bytes=1_000_000)
    events: list[SessionEvent] = []
    async with KernelRuntime(config) as runtime:
        registry = ToolRegistry(mode="code", code_runtime=runtime)
        registry.on_event(events.append)
        files_section = registry.prompt().section("tools:files")
        assert files_section is not None and "`inputs/data.csv`" in files_section.text
        result = await registry.execute(ToolCall(call_id="f1", name="run_code", arguments={
            "code": PROGRAM, "description": "Write a report"}))
    assert isinstance(result, ToolSuccess), result
    value: Any = result.value
    assert value["logs"] == ["a,b"] and value["result"] == 3
    assert value["files"] == [
        {"name": "huge.bin", "size": 2_000_000, "mime_type": "application/octet-stream",
         "not_collected": "larger than max_output_file_bytes=1000000"},
        {"name": "report.txt", "size": 21, "mime_type": "text/plain"},
        {"name": "tables/big.bin", "size": 200_000, "mime_type": "application/octet-stream"},
    ]
    # The model reads names, sizes and reasons, never the bytes.
    assert FILES_HEADING in result.text and "- report.txt (21 bytes, text/plain)" in result.text
    assert "total: 3" not in result.text
    # The user gets the bytes of every collected file.
    attached = {file.name: file.data for file in result.attachments}
    assert attached == {"report.txt": b"total: 3\n<b>bold</b>\n",
                        "tables/big.bin": b"\0" * 200_000}
    # %%run_code's outcome gives them by name.
    outcome = RunCodeOutcome(result=result, program=PROGRAM, description="Write a report")
    assert outcome.files == attached
    # The log keeps small files as base64 and text previews; big ones only listed.
    logged = next(e for e in events if e["kind"] == "tool/result")
    json.dumps(logged)  # JSON all the way
    meta: Any = logged["meta"]
    meta_files = {f["name"]: f for f in meta["files"]}
    assert base64.b64decode(meta_files["report.txt"]["data"]) == b"total: 3\n<b>bold</b>\n"
    assert meta_files["report.txt"]["preview"] == "total: 3\n<b>bold</b>\n"
    assert CARD_FILE_BYTES < 200_000 and "data" not in meta_files["tables/big.bin"]
    assert meta_files["huge.bin"]["not_collected"].startswith("larger than")
    # The card shows each file, a download link for the small one, the text preview.
    card = RunCodeCard(arguments={"code": PROGRAM, "description": "Write a report"})
    card.finish(durable_from_event(logged))
    bundle = card._repr_mimebundle_()
    text, html = str(bundle["text/plain"]), str(bundle["text/html"])
    assert "files (3):" in text
    assert "- report.txt (21 bytes, text/plain)" in text
    assert "- huge.bin (2000000 bytes, application/octet-stream; not collected: larger" in text
    assert 'download="report.txt" href="data:application/octet-stream;base64,' in html
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    assert html.count('class="dsh-file"') == 1


async def test_no_files_no_change() -> None:
    """A run that writes nothing has exactly the value and prompt it had before."""
    async with KernelRuntime(KernelRuntimeConfig(pool_size=0)) as runtime:
        registry = ToolRegistry(mode="code", code_runtime=runtime)
        result = await registry.execute(ToolCall(call_id="f2", name="run_code", arguments={
            "code": "print('hi')", "description": "Say hi"}))
        kernel_sections = [s.id for s in registry.prompt().sections]
    assert isinstance(result, ToolSuccess)
    assert result.value == {"logs": ["hi"]} and result.attachments == ()
    assert result.text == "hi"
    in_process = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    assert kernel_sections == [s.id for s in in_process.prompt().sections] == [
        "tools:code-only", "tools:sdk"]
