"""What the model reads of a kernel that did not start: each host path cut to its last
part (the kernel test with a real runtime: tests/kernel/test_files.py)."""

from __future__ import annotations

import pytest

from dsh_jupyter.kernel.run.sources import start_failed, without_host_paths


@pytest.mark.parametrize(("text", "said"), [
    ("No such file or directory: '/home/ann/secret/data.csv'",
     "No such file or directory: 'data.csv'"),
    ('"/proc/9681/root/workspace" is gone', '"workspace" is gone'),
    ("/opt/venv/bin/python (exit 127)", "python (exit 127)"),
    ("moved to /srv/a/b/ and (/x/y)", "moved to b and (y)"),
    ("path=/etc/kernel.json;", "path=kernel.json;"),
    ("the root / itself", "the root / itself"),
    ("gateway http://gw:8888/api/kernels refused", "gateway http://gw:8888/api/kernels refused"),
    ("a relative inputs/data.csv and 3/4 stay", "a relative inputs/data.csv and 3/4 stay"),
])
def test_absolute_paths_are_cut_to_their_last_part(text: str, said: str) -> None:
    assert without_host_paths(text) == said


def test_the_failure_is_a_kernel_exit_and_the_log_keeps_the_path(
        caplog: pytest.LogCaptureFixture) -> None:
    result = start_failed("the kernel could not be confined: '/home/ann/x.csv' is missing")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert result.failure.message == "the kernel could not be confined: 'x.csv' is missing"
    assert "/home/ann/x.csv" in caplog.text
