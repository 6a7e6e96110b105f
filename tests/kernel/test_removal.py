"""Removing a workspace whatever its program left in it: trees far deeper than Python's
recursion limit and PATH_MAX, directories and files locked with chmod, FIFOs and sockets,
symlinks to the host's files (the link goes, never the target), with few descriptors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tree_support import (
    as_ordinary_user,
    build_deep,
    build_locked,
    describe,
    make_outside,
    mount_tmpfs,
)

from dsh_jupyter.kernel.confine.sandbox import confinement_problem
from dsh_jupyter.kernel.run import removal
from dsh_jupyter.kernel.run.workspace import remove_tree

AS_ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="already an ordinary user: the tests as this user cover it")


@pytest.fixture(autouse=True)
def tmp_path_emptied(tmp_path: Path) -> Iterator[None]:
    """Empty ``tmp_path`` even when a test failed: pytest removes old temp directories with
    ``shutil.rmtree``, which a deep tree left behind would break for every later run."""
    yield
    for path in tmp_path.iterdir():
        removal.remove_tree(path)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("depth", [3_000, 10_000])
def test_deep_trees_are_removed(tmp_path: Path, depth: int) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    build_deep(str(tree), depth)
    before = open_fds()
    remove_tree(tree)
    assert not tree.exists()
    assert open_fds() == before


def test_a_locked_tree_is_removed_and_links_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make_outside(str(outside))
    kept = describe(str(outside))
    build_locked(str(tmp_path / "tree"), str(outside))
    remove_tree(tmp_path / "tree")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    assert describe(str(outside)) == kept  # contents and modes: nothing followed a link
    assert os.stat(outside / "file").st_nlink == 1  # the hard link went, the file stayed


@AS_ROOT_ONLY
def test_a_locked_tree_is_removed_by_an_ordinary_user(tmp_path: Path) -> None:
    """As root, no permission bit stops anything: here the program's owner (not root)
    builds and removes the tree, so every lock bites."""

    def build_and_remove() -> list[object]:
        make_outside("outside")
        kept = describe("outside")
        build_locked("tree", "outside")
        build_deep("tree/read-only-dir/sub", 300, lock_every=7)  # locked, under a locked one
        remove_tree(Path("tree"))
        return [sorted(os.listdir(".")), describe("outside") == kept]

    assert as_ordinary_user(tmp_path, build_and_remove) == [["outside"], True]


def test_a_deep_locked_tree_is_removed_with_a_dozen_descriptors(tmp_path: Path) -> None:
    """10,000 levels, every 1,000th locked, with descriptors 0-15 only (three taken):
    a remover holding one descriptor per level would run out at once."""

    def build_and_remove() -> list[str]:
        os.mkdir("tree")
        build_deep("tree", 10_000, lock_every=1_000)
        remove_tree(Path("tree"))
        return os.listdir(".")

    assert as_ordinary_user(tmp_path, build_and_remove, max_fds=16) == []


def test_symlink_and_missing_roots(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "file").write_text("keep me")
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_tree(link)
    assert not link.is_symlink() and (target / "file").read_text() == "keep me"
    remove_tree(tmp_path / "missing")  # idempotent: nothing there is nothing to do
    remove_tree(link)
    assert removal.remove_tree("/") == ["'/': not a tree to remove"]
    assert removal.remove_tree(f"{tmp_path}/..") == [f"'{tmp_path}/..': not a tree to remove"]


@AS_ROOT_ONLY
def test_what_cannot_be_removed_is_logged_not_raised(tmp_path: Path) -> None:
    """A directory of root's inside the program's tree: its owner cannot empty it, so the
    remover logs what it left and removes the rest."""
    tree = tmp_path / "tree"
    (tree / "keep").mkdir(parents=True)
    (tree / "keep" / "file").write_text("x")
    os.chown(tree, 65534, 65534)

    def remove() -> list[str]:
        build_deep("tree", 50, lock_every=10)
        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
        logger = logging.getLogger("dsh_jupyter.kernel.workspace")
        logger.addHandler(handler)
        try:
            remove_tree(Path("tree"))
        finally:
            logger.removeHandler(handler)
        return records

    records = as_ordinary_user(tmp_path, remove)
    assert records == ["could not remove all of tree: tree/keep/file: Permission denied"]
    assert sorted(p.name for p in tree.iterdir()) == ["keep"]  # the rest went


@pytest.mark.skipif(confinement_problem() is not None, reason="needs user namespaces")
def test_a_file_system_mounted_in_the_tree_is_left_alone(tmp_path: Path) -> None:
    """An unconfined program can mount something in its workspace (FUSE, or a tmpfs in a
    namespace of its own): the remover never descends into another file system."""

    def mount_and_remove() -> list[object]:
        os.makedirs("tree/mnt")
        os.mkdir("tree/other")
        mount_tmpfs("tree/mnt")
        Path("tree/mnt/file").write_text("not the program's")
        left = removal.remove_tree("tree")
        return [left, os.listdir("tree"), Path("tree/mnt/file").read_text()]

    assert as_ordinary_user(tmp_path, mount_and_remove) == [
        ["tree/mnt: another file system is mounted here: left alone"], ["mnt"],
        "not the program's"]


def test_the_fork_server_can_load_it_by_path(tmp_path: Path) -> None:
    """The fork server (standard library only) loads the remover by path, as it does
    ``proctree``: no import of the package."""
    tree = tmp_path / "tree"
    tree.mkdir()
    build_deep(str(tree), 3_000, lock_every=100)
    script = ("import importlib.util, sys\n"
              "spec = importlib.util.spec_from_file_location('r', sys.argv[1])\n"
              "module = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(module)\n"
              "print(module.remove_tree(sys.argv[2]), 'dsh_jupyter' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script, removal.__file__,
                           str(tree)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[] False\n", "")
    assert not tree.exists()
