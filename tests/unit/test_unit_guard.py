"""The unit tier's guard trips: each way of starting a process or a kernel fails the test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys

import pytest
from jupyter_client.manager import AsyncKernelManager

from dsh_jupyter.kernel import KernelRuntime

REFUSED = pytest.fail.Exception


def test_starting_a_subprocess_or_forking_fails(nothing_started: list[str]) -> None:
    with pytest.raises(REFUSED, match=r"started a subprocess \(true\) from "
                       r"tests/unit/test_unit_guard\.py:\d+: it belongs in tests/kernel/"):
        subprocess.run(["true"], check=False)
    with pytest.raises(REFUSED, match=r"a process \(os\.fork\)"):
        os.fork()
    with pytest.raises(REFUSED, match=r"a process \(os\.system\)"):
        os.system("true")
    assert len(nothing_started) == 3
    nothing_started.clear()  # refused on purpose: this test passes


async def test_asyncio_subprocesses_and_kernels_fail(nothing_started: list[str]) -> None:
    with pytest.raises(REFUSED, match="started a subprocess"):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    with pytest.raises(REFUSED, match="started a subprocess"):
        await asyncio.create_subprocess_shell("true")
    with pytest.raises(REFUSED, match="a jupyter_client kernel"):
        await AsyncKernelManager().start_kernel()
    with pytest.raises(REFUSED, match="a kernel runtime"):
        async with KernelRuntime():
            pass
    assert len(nothing_started) == 4
    nothing_started.clear()


def test_a_swallowed_refusal_is_still_seen(nothing_started: list[str]) -> None:
    with contextlib.suppress(BaseException):  # code under test that catches everything
        subprocess.run(["true"], check=False)
    [said] = nothing_started
    assert re.fullmatch(r"a unit test started a subprocess \(true\) from tests/unit/"
                        r"test_unit_guard\.py:\d+: it belongs in tests/kernel/ or "
                        r"tests/integration/", said), said
    nothing_started.clear()  # left in, the guard fails this test at teardown
