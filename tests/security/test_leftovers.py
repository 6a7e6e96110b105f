"""What a real program leaves in its workspace cannot break cleanup: a tree deeper than
``shutil.rmtree`` can recurse, directories and files chmod-ed 000, a read-only working
directory, FIFOs, sockets and symlinks to the host's files. Closing the runtime raises
nothing, logs nothing, and leaves nothing on disk; the symlinks' targets survive.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import pytest
from reliability_support import Harness, echo_body, json_tool, returned_by, run_code
from tree_support import build_deep, build_locked, describe, make_outside

from dsh_jupyter.kernel import StatefulConfig

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]

BUILDERS = "\n".join(inspect.getsource(f) for f in (build_deep, build_locked, make_outside))
LEAVE_A_MESS = """\
import os
os.mkdir("deep")
build_deep("deep", 3_000, 250)
# Next to the working directory: a hard link cannot cross into it from another mount
# (a confined kernel's /tmp is a mount of its own).
outside = os.path.join(os.path.dirname(os.getcwd()), "outside")
make_outside(outside)
build_locked("locked", outside)
os.symlink({host_file!r}, "link-to-host-file")
os.symlink({host_dir!r}, "link-to-host-dir")
for path in ("read-only", "locked-000"):
    os.mkdir(path)
    os.mkfifo(os.path.join(path, "fifo"))
os.chmod("read-only", 0o555)
os.chmod("locked-000", 0o000)
os.chmod("outputs", 0o000)  # collected after the run: the collector must cope as well
os.chmod(os.environ["TMPDIR"], 0o000)
os.chmod(".", 0o555)
return sorted(os.listdir("."))
"""
LEFT = ["deep", "link-to-host-dir", "link-to-host-file", "locked", "locked-000", "outputs",
        "read-only"]


def mess(host_files: dict[str, str]) -> str:
    """The program: the builders' source, then calls (a template's braces would clash)."""
    return BUILDERS + LEAVE_A_MESS.format(**host_files)


@pytest.fixture
def host_files(tmp_path: Path) -> dict[str, str]:
    """A host file and directory the program links to (they must survive)."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "file").write_text("keep me")
    (tmp_path / "file").write_text("keep me")
    return {"host_file": str(tmp_path / "file"), "host_dir": str(tmp_path / "dir")}


def workspaces(harness: Harness) -> list[Path]:
    return list(harness.root.glob("dsh-runtime-*/dsh-kernel-*"))


@pytest.mark.parametrize("launcher", ["fork", "stock"])
async def test_closing_the_runtime_removes_what_a_program_left(
        harness: Harness, host_files: dict[str, str], tmp_path: Path,
        caplog: pytest.LogCaptureFixture, launcher: str) -> None:
    kept = describe(str(tmp_path))
    registry, log = await harness.registry(json_tool("echo", echo_body), launcher=launcher)
    result = await run_code(registry, mess(host_files))
    assert result.error is None, result.error
    assert returned_by(result) == LEFT
    log.settlement()
    assert not await harness.finish()  # closes the runtime: no exception, no directory left
    assert not list(harness.root.iterdir())
    assert describe(str(tmp_path)) == kept
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("dsh_jupyter")]


async def test_a_stateful_sessions_kernel_leaves_nothing_either(
        harness: Harness, host_files: dict[str, str], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A kept kernel's workspace lives as long as its session: removed on reset, and on
    closing the runtime with the session still open."""
    kept = describe(str(tmp_path))
    registry, log = await harness.registry(json_tool("echo", echo_body),
                                           stateful=StatefulConfig())
    runtime = harness.runtimes[-1]
    result = await run_code(registry, mess(host_files))
    assert returned_by(result) == LEFT
    [workspace] = workspaces(harness)  # kept with its kernel, mess and all
    assert await runtime.reset(registry.session_key)
    assert not workspace.exists()
    again = await run_code(registry, mess(host_files), call_id="again")
    assert returned_by(again) == LEFT
    assert len(workspaces(harness)) == 1
    log.settlement()
    assert not await harness.finish()
    assert not list(harness.root.iterdir())
    assert describe(str(tmp_path)) == kept
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("dsh_jupyter")]
