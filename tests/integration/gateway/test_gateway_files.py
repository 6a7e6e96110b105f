"""Files in and out of kernels on a real Kernel Gateway: inputs sent through the kernel
connection at setup (read-only, capped), outputs collected through it after the run, in
a private working directory per kernel."""

from __future__ import annotations

from pathlib import Path

import pytest
from gateway_support import GatewayRuntimeFactory, LocalGateway
from kernel_support import run

from dsh_jupyter.kernel import KernelRuntimeConfig, StatefulConfig
from dsh_jupyter.kernel.run.remote_files import CHUNK_BYTES, MAX_REMOTE_INPUT_BYTES
from dsh_jupyter.runtime import CodeRunResult, FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


async def test_inputs_in_outputs_out(make_runtime: GatewayRuntimeFactory,
                                     tmp_path: Path) -> None:
    table = tmp_path / "data.csv"
    table.write_text("a,b\n1,2\n")
    refs = tmp_path / "refs"
    (refs / "deep").mkdir(parents=True)
    (refs / "deep" / "note.txt").write_text("hello")
    runtime = await make_runtime(inputs={"data.csv": table, "refs": refs},
                                 max_output_file_bytes=3 * CHUNK_BYTES)
    result = await run(runtime, f"""
import os
print(open('inputs/data.csv').read().splitlines()[1], open('inputs/refs/deep/note.txt').read())
print(sorted(os.listdir('.')))
print(*(oct(os.stat(p).st_mode & 0o777) for p in ('inputs', 'inputs/refs', 'inputs/data.csv')))
os.makedirs('outputs/sub')
open('outputs/report.txt', 'w').write('done')
open('outputs/sub/big.bin', 'wb').write(bytes(range(256)) * (2 * {CHUNK_BYTES} // 256 + 1))
open('outputs/huge.bin', 'wb').write(b'x' * (3 * {CHUNK_BYTES} + 1))
os.symlink('/etc/hostname', 'outputs/link')
""")
    assert result.failure is None, result.failure
    # Read-only as an unconfined local copy is: no write bits (see docs/run-files.md).
    assert result.logs == ("1,2 hello", "['inputs', 'outputs']", "0o555 0o555 0o444")
    files = {file.name: file for file in result.files}
    assert sorted(files) == ["huge.bin", "link", "report.txt", "sub/big.bin"]
    assert files["report.txt"].data == b"done"
    big = bytes(range(256)) * (2 * CHUNK_BYTES // 256 + 1)
    assert files["sub/big.bin"].data == big  # several chunks, reassembled
    assert files["huge.bin"].data is None and "max_output_file_bytes" in str(
        files["huge.bin"].not_collected)
    assert files["link"].data is None
    # Each kernel has a directory of its own: the next run does not see these files.
    again = await run(runtime, "import os\nprint(sorted(os.listdir('outputs')))")
    assert again.logs == ("[]",) and again.files == ()


def test_remote_inputs_are_capped(gateway: LocalGateway, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (MAX_REMOTE_INPUT_BYTES + 1))
    with pytest.raises(ValueError, match="at most 1048576 bytes together"):
        KernelRuntimeConfig(gateway=gateway.config(), inputs={"big.bin": big})



async def test_a_stateful_session_on_a_gateway_kernel(make_runtime: GatewayRuntimeFactory
                                                      ) -> None:
    """A remote kernel kept across runs: program 2 reads what program 1 defined, and its
    outputs come back through the connection; a reset starts the session over."""
    runtime = await make_runtime(stateful=StatefulConfig())

    async def run_in(program: str) -> CodeRunResult:
        result = await runtime.run(RunRequest(program, FunctionBindings({}), session="remote"))
        assert result.failure is None, result.failure
        return result

    first = await run_in("total = 40\nopen('outputs/a.txt', 'w').write('a')\nreturn total")
    second = await run_in("total += 2\nreturn total")
    assert [first.value, second.value] == [40, 42]
    assert [f.name for f in first.files] == ["a.txt"]
    assert second.facts["kernel.source"] == "session"
    assert await runtime.reset("remote") is True
    fresh = await run_in("return 'total' in globals()")
    assert fresh.value is False and fresh.facts["session.new"] is True
