"""Process trees read from ``/proc`` (``launch/proctree.py``): walked down through each
thread's ``children`` file, they are the trees a scan of every process finds; a process
that can run no more code is ``dying``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from dsh_jupyter.kernel.launch import proctree

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

FAMILY = """\
import os, subprocess, sys, threading, time
if os.fork() == 0:  # never waited for: a zombie (subprocess would reap a Popen's)
    os._exit(0)
def spawn(then):
    subprocess.Popen(["sleep", "60"])
    time.sleep(then)
# Forked by a thread that then exits (the child moves to another thread's list), and by
# one that stays (the child is on its list, not the main thread's).
for then in (0, 60):
    threading.Thread(target=spawn, args=(then,), daemon=True).start()
subprocess.Popen([sys.executable, "-c",
                  "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"])
print("started", flush=True)
time.sleep(60)
"""


@pytest.fixture
def family() -> Iterator[int]:
    """A process with three children (two forked by other threads), a grandchild and a
    zombie child; its PID."""
    parent = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"started\n"
        deadline = time.monotonic() + 10
        while len(proctree._scanned_tree(parent.pid)) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)  # the grandchild starts
        yield parent.pid
    finally:
        proctree.kill_tree(parent.pid)
        parent.wait()


def test_a_tree_walked_down_is_the_tree_scanned(family: int) -> None:
    walked = [stat.pid for stat in proctree.tree(family)]
    scanned = [stat.pid for stat in proctree._scanned_tree(family)]
    assert walked[0] == family and sorted(walked) == sorted(scanned) and len(walked) == 6
    direct = sorted(stat.pid for stat in proctree._scanned_tree(family) if stat.ppid == family)
    assert sorted(proctree.children(family)) == direct and len(direct) == 4


def test_without_children_files_the_walk_scans(family: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    expected = sorted(stat.pid for stat in proctree.tree(family))
    monkeypatch.setattr(proctree, "_listed_children", lambda pid: None)
    assert sorted(stat.pid for stat in proctree.tree(family)) == expected
    assert sorted(proctree.children(family)) == sorted(
        stat.pid for stat in proctree._scanned_tree(family) if stat.ppid == family)


def test_dying_is_a_zombie_or_gone_not_a_live_process() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert not proctree.dying(child.pid)
        assert not proctree.dying(os.getpid())
        child.kill()
        deadline = time.monotonic() + 10
        while (stat := proctree.read_stat(child.pid)) is not None and stat.state != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert proctree.dying(child.pid)  # a zombie, not reaped yet
    finally:
        child.kill()
        child.wait()
    assert proctree.dying(child.pid)  # gone
