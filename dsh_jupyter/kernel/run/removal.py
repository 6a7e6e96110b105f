"""Removing a directory tree a program wrote into (standard library only).

The host removes workspaces with it, and the fork server (which loads this file by path,
as it does ``proctree``) removes a runtime's directory when its host is gone. The
program is hostile and its files are its own, so :func:`remove_tree` must finish
whatever it left:

- **any depth:** no recursion (``shutil.rmtree`` recurses per level and a 3,000-deep tree
  raises ``RecursionError``, which its ``onerror`` never sees) and no path longer than one
  name (10,000 levels are far past ``PATH_MAX``): every call is relative to a directory
  descriptor (``openat``, ``unlinkat``).
- **few descriptors:** three at most, whatever the depth: the root's parent, the current
  directory and, briefly, the next one (a child, ``..``, a listing). It goes down by
  opening a child and up by opening ``..`` (never a symlink), and checks on the way up
  that ``..`` is the directory it came down from (device and inode remembered per
  level); if it is not (the tree moved meanwhile), it stops and says so. Memory is one
  small record per level of the current path plus the names of the subdirectories still
  to visit there.
- **locks:** a directory the program made unreadable, read-only or 000 is made 0700 before
  it is listed or emptied (through an ``O_PATH`` descriptor, which needs no permission on
  the directory itself). Files need nothing: unlinking asks the parent only.
- **no link is followed:** symlinks, FIFOs, sockets and devices are unlinked, never opened
  or chmod-ed; a directory is opened with ``O_NOFOLLOW``, so a symlink to a host
  directory is removed as a link and its target is untouched.
- **one file system:** a directory on another device than the root (something an
  unconfined program mounted there) is left alone and reported, as ``rm
  --one-file-system`` would: removal never deletes files of another file system.

Nothing is raised for what a program left: what could not be removed comes back as lines
of text (the host logs them). Linux (``O_PATH`` and ``/proc/self/fd``); elsewhere a locked
directory is chmod-ed with ``fchmodat(AT_SYMLINK_NOFOLLOW)``.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_REPORTED = 10
"""Problems described one by one; the rest are counted."""
_DIRECTORY_FLAGS = (os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                    | os.O_NONBLOCK)
_O_PATH = getattr(os, "O_PATH", 0)


def remove_tree(path: str | os.PathLike[str]) -> list[str]:
    """Remove ``path`` and everything below it, never following a symlink (a symlink at
    ``path`` itself is removed as a link). Idempotent: a missing ``path`` is no problem.
    Returns what could not be removed, one line each (empty: all gone)."""
    remover = _Remover(os.fspath(path))
    remover.remove()
    return remover.report()


class _Level:
    """A directory on the current path: its name in its parent, its identity (to check
    ``..`` against on the way back up) and the subdirectories still to remove."""

    __slots__ = ("device", "inode", "name", "subdirectories")

    def __init__(self, name: str, device: int, inode: int) -> None:
        self.name = name
        self.device = device
        self.inode = inode
        self.subdirectories: list[str] = []


class _Remover:
    def __init__(self, path: str) -> None:
        self.given = path
        self.path = path.rstrip(os.sep)
        self.stack: list[_Level] = []
        self.device: int | None = None
        self.problems: list[str] = []
        self.count = 0

    def remove(self) -> None:
        parent_path, name = os.path.split(self.path)
        if name in ("", ".", ".."):
            self.count += 1
            self.problems.append(f"{self.given!r}: not a tree to remove")
            return
        try:
            parent = os.open(parent_path or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as error:
            self.problem("", error)
            return
        try:
            self.remove_entry(parent, name)
        finally:
            os.close(parent)

    def remove_entry(self, parent: int, name: str) -> None:
        try:
            mode = os.lstat(name, dir_fd=parent).st_mode
        except FileNotFoundError:
            return
        except OSError as error:
            self.problem(name, error)
            return
        if not stat.S_ISDIR(mode):
            self.unlink(parent, name)
            return
        fd = self.open_directory(parent, name)
        if fd is None:
            return
        self.enter(fd, name)
        self.empty(fd)
        self.stack.clear()
        self.rmdir(parent, name)

    def empty(self, fd: int) -> None:
        """Remove everything below the stack's only level, whose directory is open as
        ``fd`` (closed on return), one level at a time."""
        try:
            while True:
                level = self.stack[-1]
                if level.subdirectories:
                    name = level.subdirectories.pop()
                    child = self.open_directory(fd, name)
                    if child is not None:
                        os.close(fd)
                        fd = child
                        self.enter(fd, name)
                    continue
                if len(self.stack) == 1:
                    return
                try:
                    up = os.open("..", _DIRECTORY_FLAGS, dir_fd=fd)
                except OSError as error:
                    self.problem("", f"cannot go back up: {error.strerror}")
                    return
                os.close(fd)
                fd = up
                self.stack.pop()
                parent = self.stack[-1]
                seen = os.fstat(fd)
                if (seen.st_dev, seen.st_ino) != (parent.device, parent.inode):
                    self.problem("", "not the directory removal came down from (moved "
                                     "meanwhile?): stopped")
                    return
                self.rmdir(fd, level.name)
        finally:
            os.close(fd)

    def enter(self, fd: int, name: str) -> None:
        """Push the level of the directory just opened as ``fd``: made 0700 if the program
        locked it, its non-directories unlinked, its subdirectories listed."""
        seen = os.fstat(fd)
        level = _Level(name, seen.st_dev, seen.st_ino)
        self.stack.append(level)
        if seen.st_mode & 0o700 != 0o700:
            try:
                os.fchmod(fd, 0o700)
            except OSError as error:
                self.problem("", error)
        try:
            # Unlinking what was listed does not disturb the listing (POSIX: only the
            # removed entry may or may not show up again); only subdirectories are kept.
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        level.subdirectories.append(entry.name)
                    else:
                        self.unlink(fd, entry.name)
        except OSError as error:
            self.problem("", error)

    def open_directory(self, parent: int, name: str) -> int | None:
        """``name`` in ``parent`` opened as a directory (made 0700 first if the program
        made it unreadable); ``None`` if it is gone, cannot be opened, or is on another
        file system than the root (a mount: its files are not the program's to lose)."""
        try:
            fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except PermissionError:
            try:
                _unlock(parent, name)
                fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
            except OSError as error:
                self.problem(name, error)
                return None
        except OSError as error:
            self.problem(name, error)
            return None
        device = os.fstat(fd).st_dev
        if self.device is None:
            self.device = device
        elif device != self.device:
            os.close(fd)
            self.problem(name, "another file system is mounted here: left alone")
            return None
        return fd

    def unlink(self, parent: int, name: str) -> None:
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError as error:
            self.problem(name, error)

    def rmdir(self, parent: int, name: str) -> None:
        try:
            os.rmdir(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError as error:
            if error.errno != errno.ENOTEMPTY or not self.count:  # else: what was left
                self.problem(name, error)

    def problem(self, name: str, error: object) -> None:
        """Note that ``name`` in the directory at the top of the stack (the directory
        itself for ``""``) could not be removed, and why."""
        self.count += 1
        if self.count > MAX_REPORTED:
            return
        names = [level.name for level in self.stack]
        if name:
            names.append(name)
        where = os.path.join(os.path.dirname(self.path), *_abridged(names))
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        self.problems.append(f"{where}: {why}")

    def report(self) -> list[str]:
        if self.count > MAX_REPORTED:
            return [*self.problems, f"and {self.count - MAX_REPORTED} more"]
        return list(self.problems)


def _unlock(parent: int, name: str) -> None:
    """chmod 0700 the directory ``name`` in ``parent``, which the program made unreadable,
    without following a symlink put there in its place."""
    if not _O_PATH:  # BSDs and macOS have lchmod: fchmodat can refuse a symlink itself
        os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
        return
    fd = os.open(name, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)  # chmod refuses an O_PATH descriptor
    finally:
        os.close(fd)


def _abridged(names: list[str]) -> list[str]:
    """A path's names, its middle elided when it is deep."""
    if len(names) <= 8:
        return names
    return [*names[:3], f"...({len(names) - 6} levels)...", *names[-3:]]
