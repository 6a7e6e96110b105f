"""Files in and out of a run, on real kernels: read-only inputs, collected outputs, caps,
and a hostile program trying to make the host read files it cannot (symlinks, hard
links, FIFOs), confined and unconfined."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from kernel_support import RuntimeFactory, run

from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.confine.sandbox import confinement_problem
from dsh_jupyter.kernel.run.files import MAX_DEPTH, MAX_LISTED_SKIPPED, OutputCollector

pytestmark = pytest.mark.timeout(60)

CONFINED = pytest.param(
    "auto", id="confined",
    marks=pytest.mark.skipif(confinement_problem() is not None,
                             reason="kernels cannot be confined on this machine"))
SANDBOXES = [CONFINED, pytest.param(None, id="unconfined")]


def opener(root: Path) -> Callable[[], int]:
    """What a workspace's ``open_root`` is for an unconfined kernel rooted at ``root``."""
    return lambda: os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    table = tmp_path / "data.csv"
    table.write_text("a,b\n1,2\n")
    refs = tmp_path / "refs"
    (refs / "deep").mkdir(parents=True)
    (refs / "deep" / "note.txt").write_text("hello")
    return {"data.csv": table, "refs": refs}


async def _runtime(make_runtime: RuntimeFactory, sandbox: object,
                   **options: object) -> KernelRuntime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return await make_runtime(sandbox=sandbox, **options)


@pytest.mark.parametrize("launcher", ["fork", "stock"])
@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_inputs_are_visible_and_read_only(make_runtime: RuntimeFactory, sandbox: object,
                                                launcher: str, data: dict[str, Path]) -> None:
    runtime = await _runtime(make_runtime, sandbox, inputs=data, launcher=launcher)
    result = await run(runtime, """
import os, errno
print(open('inputs/data.csv').read().splitlines()[1])
print(open('inputs/refs/deep/note.txt').read())
def attempt(what, action):
    try:
        action()
        print(what, 'WROTE')
    except OSError as error:
        print(what, 'refused', errno.errorcode[error.errno])
attempt('overwrite', lambda: open('inputs/data.csv', 'w').write('x'))
attempt('add', lambda: open('inputs/new.txt', 'w').write('x'))
attempt('add-in-dir', lambda: open('inputs/refs/new.txt', 'w').write('x'))
attempt('remove', lambda: os.remove('inputs/data.csv'))
""")
    assert result.failure is None, result
    assert result.logs[:2] == ("1,2", "hello")
    if sandbox is None and os.geteuid() == 0:
        # Unconfined root ignores mode bits: the copy has none to write, but it could.
        modes = await run(runtime, "import os\nprint(oct(os.stat('inputs/data.csv').st_mode"
                                   " & 0o777), oct(os.stat('inputs/refs').st_mode & 0o777))")
        assert modes.logs == ("0o444 0o555",)
    else:
        assert all("refused" in line for line in result.logs[2:]), result.logs
    if sandbox == "auto":  # a read-only mount, whatever the mode bits say
        assert all(line.endswith("EROFS") for line in result.logs[2:]), result.logs
        chmod = await run(runtime, """
import os
try:
    os.chmod('inputs/data.csv', 0o666)
except OSError as error:
    print('chmod refused', error.errno)
try:
    open('inputs/data.csv', 'w').write('x')
    print('WROTE')
except OSError as error:
    print('write refused', error.strerror)
""")
        assert chmod.logs == ("chmod refused 30", "write refused Read-only file system")
    assert data["data.csv"].read_text() == "a,b\n1,2\n"
    assert sorted(os.listdir(data["refs"])) == ["deep"]


async def test_no_inputs_no_inputs_directory(make_runtime: RuntimeFactory) -> None:
    runtime = await _runtime(make_runtime, None)
    result = await run(runtime, "import os\nprint(sorted(os.listdir('.')))")
    assert result.logs == ("['outputs']",)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_outputs_are_collected_with_their_bytes(make_runtime: RuntimeFactory,
                                                      sandbox: object) -> None:
    runtime = await _runtime(make_runtime, sandbox)
    result = await run(runtime, """
import os
open('outputs/report.txt', 'w').write('line 1\\nline 2\\n')
os.makedirs('outputs/tables')
open('outputs/tables/a.csv', 'wb').write(bytes(range(256)))
open('elsewhere.txt', 'w').write('not an output')
""")
    assert result.failure is None, result
    by_name = {file.name: file for file in result.files}
    assert list(by_name) == ["report.txt", "tables/a.csv"]
    assert by_name["report.txt"].data == b"line 1\nline 2\n"
    assert by_name["report.txt"].mime_type == "text/plain"
    assert by_name["tables/a.csv"].data == bytes(range(256))
    assert by_name["tables/a.csv"].size == 256
    assert by_name["tables/a.csv"].mime_type == "text/csv"


async def test_caps_list_files_without_dropping_them(make_runtime: RuntimeFactory) -> None:
    runtime = await _runtime(make_runtime, None, max_output_file_bytes=1000,
                             max_output_files=3, max_output_total_bytes=2500)
    result = await run(runtime, """
open('outputs/big.bin', 'wb').write(b'x' * 1001)
for i in range(5):
    open(f'outputs/f{i}.txt', 'w').write('y' * 900)
""")
    files = {file.name: file for file in result.files}
    assert sorted(files) == ["big.bin", "f0.txt", "f1.txt", "f2.txt", "f3.txt", "f4.txt"]
    assert files["big.bin"].data is None
    assert files["big.bin"].size == 1001
    assert "max_output_file_bytes=1000" in (files["big.bin"].not_collected or "")
    assert [files[f"f{i}.txt"].collected for i in range(5)] == [True, True, False, False, False]
    assert "max_output_total_bytes=2500" in (files["f2.txt"].not_collected or "")
    tight = await _runtime(make_runtime, None, max_output_files=2)
    counted = await run(tight, "for i in range(4): open(f'outputs/{i}', 'w').write('z')")
    assert [f.collected for f in counted.files] == [True, True, False, False]
    assert "max_output_files=2" in (counted.files[2].not_collected or "")


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_escapes_collect_nothing_of_the_hosts(make_runtime: RuntimeFactory,
                                                    sandbox: object, tmp_path: Path) -> None:
    """The program names a host file it cannot read (confined) through a symlink, a
    symlinked directory, a hard link and a swapped ``outputs`` directory; the host reads
    none of them."""
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST SECRET")
    runtime = await _runtime(make_runtime, sandbox)
    result = await run(runtime, f"""
import os
secret = {str(secret)!r}
os.symlink(secret, 'outputs/link.txt')
os.symlink(os.path.dirname(secret), 'outputs/dir')
try:
    os.link(secret, 'outputs/hard.txt')
    print('linked')
except OSError as error:
    print('link refused')
open('mine.txt', 'w').write('mine')
os.link('mine.txt', 'outputs/mine-linked.txt')
os.mkfifo('outputs/pipe')
""")
    assert result.failure is None, result
    assert all(file.data is None or b"HOST SECRET" not in file.data for file in result.files)
    reasons = {file.name: file.not_collected for file in result.files}
    assert reasons["link.txt"] == "a symbolic link (not followed), not a regular file"
    assert reasons["dir"] == "a symbolic link (not followed), not a regular file"
    assert reasons["mine-linked.txt"] == "it has other hard links"
    assert reasons["pipe"] == "a FIFO, not a regular file"
    if sandbox == "auto":
        assert result.logs == ("link refused",)  # the host file is not even visible
    else:
        assert reasons.get("hard.txt") == "it has other hard links"
    swapped = await run(runtime, f"""
import os
os.rmdir('outputs')
os.symlink({str(tmp_path)!r}, 'outputs')
""")
    assert swapped.failure is None, swapped
    assert swapped.files == ()


def test_input_names_are_checked(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("x")
    for name in ("../t.csv", "/t.csv", "a/../t.csv", "a//t.csv", "./t.csv", ""):
        with pytest.raises(ValueError, match=r"relative path|non-empty"):
            KernelRuntimeConfig(inputs={name: table})
    with pytest.raises(ValueError, match="does not exist"):
        KernelRuntimeConfig(inputs={"x": tmp_path / "missing"})
    with pytest.raises(ValueError, match="lies inside"):
        KernelRuntimeConfig(inputs={"a": tmp_path, "a/t.csv": table})
    with pytest.raises(ValueError, match="max_output_files"):
        KernelRuntimeConfig(max_output_files=-1)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_an_input_gone_before_the_run_fails_it_without_the_hosts_paths(
        make_runtime: RuntimeFactory, sandbox: object, data: dict[str, Path],
        caplog: pytest.LogCaptureFixture) -> None:
    # Checked when configured, deleted since: the start fails, and the model reads the
    # file's name; the host's log has its whole path (the model's line had it before).
    runtime = await _runtime(make_runtime, sandbox, inputs=data)
    data["data.csv"].unlink()
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "data.csv" in result.failure.message
    assert str(data["data.csv"].parent) not in result.failure.message, result.failure.message
    logged = [r.getMessage() for r in caplog.records if "did not start" in r.getMessage()]
    assert logged and str(data["data.csv"]) in logged[-1]


def test_a_collector_returns_only_files_new_or_changed_since_its_last_collection(
        tmp_path: Path) -> None:
    """What a kernel kept across runs needs: collect after each run, get that run's files."""
    outputs = tmp_path / "work" / "outputs"
    outputs.mkdir(parents=True)
    collector = OutputCollector(opener(tmp_path), KernelRuntimeConfig().output_limits)
    (outputs / "a.txt").write_text("one")
    assert [f.name for f in collector.collect().files] == ["a.txt"]
    assert collector.collect().files == ()
    (outputs / "b.txt").write_text("two")
    (outputs / "a.txt").write_text("one, longer")
    assert [(f.name, f.data) for f in collector.collect().files] == [
        ("a.txt", b"one, longer"), ("b.txt", b"two")]


def test_a_collector_sees_an_empty_outputs_directory_without_collecting(
        tmp_path: Path) -> None:
    """``empty()`` (a look on the event loop that spares a run the worker thread) is true
    only when there is nothing to collect: a file, or a directory, anywhere below counts."""
    collector = OutputCollector(opener(tmp_path), KernelRuntimeConfig().output_limits)
    assert collector.empty()  # no work/outputs at all
    outputs = tmp_path / "work" / "outputs"
    outputs.mkdir(parents=True)
    assert collector.empty()
    (outputs / "sub").mkdir()
    assert not collector.empty()
    (outputs / "sub" / "x.txt").write_text("x")
    assert [f.name for f in collector.collect().files] == ["sub/x.txt"]


def test_a_collection_is_bounded(tmp_path: Path) -> None:
    outputs = tmp_path / "work" / "outputs"
    deep = outputs.joinpath(*["d"] * (MAX_DEPTH + 1))
    deep.mkdir(parents=True)
    (deep / "x").write_text("x")
    for i in range(MAX_LISTED_SKIPPED + 30):
        (outputs / f"f{i:04}").write_text("y")
    collected = OutputCollector(opener(tmp_path), dataclasses.replace(
        KernelRuntimeConfig().output_limits, max_files=5)).collect()
    assert sum(f.collected for f in collected.files) == 5
    assert len(collected.files) == 5 + MAX_LISTED_SKIPPED
    entries = MAX_LISTED_SKIPPED + 30 + 1  # the files and the too-deep directory
    assert collected.omitted == entries - 5 - MAX_LISTED_SKIPPED  # counted, not listed
    assert collected.files[0].not_collected == f"deeper than {MAX_DEPTH} directories"
