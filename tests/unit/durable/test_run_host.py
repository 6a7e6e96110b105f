"""A run's host, ``<pid>@<hostname>``: read back as alive, gone or unknown. (A zombie host:
tests/integration/durable/test_run_host_processes.py, the unit tier starts no process.)"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from dsh_jupyter.durable.host import current_host, host_state, pid_exists


def test_this_process_is_a_host_that_is_alive() -> None:
    assert current_host() == f"{os.getpid()}@{socket.gethostname()}"
    assert host_state(current_host()) == "alive"


def test_the_pid_decides_on_this_machine() -> None:
    asked: list[int] = []

    def exists(pid: int) -> bool:
        asked.append(pid)
        return pid == 41

    assert host_state("41@box", this_machine="box", exists=exists) == "alive"
    assert host_state("42@box", this_machine="box", exists=exists) == "gone"
    assert asked == [41, 42]


@pytest.mark.parametrize("host", ["41@other-box", "41@box.example.com", "41@", "41@BOX"])
def test_a_host_on_another_machine_is_unknown_and_not_probed(host: str) -> None:
    def exists(pid: int) -> bool:
        raise AssertionError(f"probed pid {pid} of another machine")

    assert host_state(host, this_machine="box", exists=exists) == "unknown"


@pytest.mark.parametrize("host", ["", "box", "41", "@box", "0@box", "-1@box", "x41@box",
                                  "4 1@box", "\u00b2@box", "41 @box"])
def test_a_host_not_in_the_form_is_unknown(host: str) -> None:
    # 0 and -1 matter most: os.kill(0, 0) and os.kill(-1, 0) probe process groups.
    assert host_state(host, this_machine="box", exists=lambda pid: True) == "unknown"


def test_pid_exists_for_this_process_and_not_beyond_any_pid() -> None:
    assert pid_exists(os.getpid())
    assert not pid_exists(2**40)  # not even a pid_t
    pid_max = Path("/proc/sys/kernel/pid_max")
    if pid_max.exists():
        assert not pid_exists(int(pid_max.read_text()) + 1)
