"""A run's host read back from real processes: one that exited is gone, whether or not its
parent has reaped it yet (a zombie still answers ``kill(pid, 0)``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from dsh_jupyter.durable.host import host_state, pid_exists

pytestmark = pytest.mark.timeout(60)


def test_a_running_child_is_alive_and_an_exited_one_gone_reaped_or_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    host = f"{child.pid}@{socket.gethostname()}"
    try:
        assert host_state(host) == "alive"
    finally:
        assert child.stdin is not None
        child.stdin.close()  # it exits at the end of its input
    # Wait for it to exit but leave it unreaped: a zombie, as a killed host is until its
    # parent (a Jupyter server, a shell) collects it.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    os.kill(child.pid, 0)  # the pid still answers
    assert not pid_exists(child.pid)
    assert host_state(host) == "gone"
    child.wait()
    assert host_state(host) == "gone"
