"""Files in and out of a run: read-only inputs placed in the working directory, and the
files a program wrote under ``outputs/`` collected after it ran.

::

    work/                    the program's working directory (``Workspace.cwd``)
        inputs/<name>        KernelRuntimeConfig(inputs={name: path}): read-only
        outputs/             made empty before the run; what the program writes here is
                             collected into CodeRunResult.files

Inputs: a confined kernel gets each input bind-mounted read-only (``_confine`` binds
``inputs/`` itself read-only first, so nothing can be added next to them either); a
write fails with ``EROFS`` even after ``chmod``. An unconfined kernel gets a copy with
its write bits cleared: the program runs as the host's user and could set them again,
so there the inputs are protected from mistakes, not from an attacker (an unconfined
program reaches every file of the user anyway, see ``docs/security.md``).

Outputs: the program is an attacker and its workspace is its own, so the host reads it
as it would a hostile archive. :class:`OutputCollector` walks ``outputs/`` with
directory file descriptors (``openat``) and ``O_NOFOLLOW`` on every component, from the
workspace root the host made; it keeps regular files only (a symlink, FIFO, socket or
device is listed, never opened), refuses a file with more than one hard link (a link to
a file the host can read but the program cannot see would leak it), checks that the file
it opened is the one it listed (same inode), and reads at most the cap plus one byte.
Every file found is reported: over a cap it is listed with the reason and no bytes.

A collector remembers what it returned (inode, size, modification time), so a kernel
kept across runs can call :meth:`OutputCollector.collect` after each run and get only
the files new or changed during that run.
"""

from __future__ import annotations

import contextlib
import errno
import mimetypes
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from ...runtime import RunFile

INPUTS_DIR = "inputs"
"""Where inputs appear, relative to the program's working directory."""
OUTPUTS_DIR = "outputs"
"""Where the program writes files to return, relative to its working directory."""
MAX_DEPTH = 8
"""Directories below ``outputs/`` deeper than this are not walked (and are reported)."""
MAX_SCANNED = 10_000
"""Directory entries looked at per collection, at most: a program that makes a million
files costs the host a bounded walk, and the rest are counted as omitted."""
MAX_LISTED_SKIPPED = 100
"""Files listed as not collected, at most (the rest are counted as omitted)."""
_READ_CHUNK = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DIR_FLAGS = _OPEN_FLAGS | os.O_DIRECTORY


def check_inputs(inputs: object) -> MappingProxyType[str, Path]:
    """``inputs`` as ``{name: absolute real path}``; ``ValueError`` naming what is wrong.

    A name is a relative POSIX path (``"data.csv"``, ``"refs/2024"``) without ``.``,
    ``..`` or empty components; no name may lie inside another. Each path must exist
    and be a regular file or a directory (symlinks are resolved here, once)."""
    if not isinstance(inputs, Mapping):
        raise ValueError("inputs must map names (paths under inputs/) to host paths")
    checked: dict[str, Path] = {}
    for name, source in inputs.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"inputs: a name must be a non-empty string, not {name!r}")
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or "\0" in name or any(
                part in ("", ".", "..") for part in parts):
            raise ValueError(f"inputs: name {name!r} must be a relative path like 'data.csv' "
                             "or 'refs/2024' (no leading '/', no '.', '..' or empty parts)")
        if not isinstance(source, str | os.PathLike):
            raise ValueError(f"inputs[{name!r}] must be a path, not {type(source).__name__}")
        path = Path(os.path.realpath(os.fspath(source)))
        if not path.exists():
            raise ValueError(f"inputs[{name!r}]: {os.fspath(source)} does not exist")
        if not (path.is_file() or path.is_dir()):
            raise ValueError(f"inputs[{name!r}]: {os.fspath(source)} is neither a regular "
                             "file nor a directory")
        checked[name] = path
    for name in checked:
        for other in checked:
            if other != name and other.startswith(name + "/"):
                raise ValueError(f"inputs: {other!r} lies inside {name!r}: give one of them")
    return MappingProxyType(dict(sorted(checked.items())))


def prepare_work_directory(cwd: Path, inputs: Mapping[str, Path], *, copy: bool) -> None:
    """Make ``outputs/`` and, with inputs, ``inputs/`` in a new workspace's ``cwd``.
    ``copy``: an unconfined kernel's inputs, copied and made read-only; otherwise only the
    mount points ``_confine`` binds the inputs onto are made."""
    (cwd / OUTPUTS_DIR).mkdir(mode=0o700, exist_ok=True)
    if not inputs:
        return
    root = cwd / INPUTS_DIR
    root.mkdir(mode=0o700, exist_ok=True)
    for name, source in inputs.items():
        target = root / name
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if copy:
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copyfile(source, target)
        elif source.is_dir():
            target.mkdir(mode=0o700)
        else:
            target.touch(mode=0o600)
    if copy:
        _make_read_only(root)


def input_mounts(cwd: Path, inputs: Mapping[str, Path]) -> list[list[str]]:
    """``[[host path, path in the kernel], ...]`` for a confinement plan."""
    root = cwd / INPUTS_DIR
    return [[str(source), str(root / name)] for name, source in inputs.items()]


def _make_read_only(root: Path) -> None:
    """Clear the write bits below ``root`` (children before their directory)."""
    for directory, subdirectories, files in os.walk(root, topdown=False):
        for name in files + subdirectories:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                os.chmod(path, stat.S_IMODE(mode) & ~0o222)
    os.chmod(root, 0o500)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputLimits:
    """Caps of one collection: bytes of one file, files collected, bytes together."""

    max_file_bytes: int
    max_files: int
    max_total_bytes: int


@dataclass(frozen=True, slots=True)
class Collected:
    """What one collection found: the files (collected or listed with a reason) and how
    many more were not even listed (past :data:`MAX_SCANNED` or :data:`MAX_LISTED_SKIPPED`)."""

    files: tuple[RunFile, ...]
    omitted: int = 0


class OutputCollector:
    """Collects ``outputs/`` of one workspace (see the module docstring). Synchronous file
    work: call it in a thread (``asyncio.to_thread``) once the program has ended."""

    def __init__(self, open_root: Callable[[], int], limits: OutputLimits) -> None:
        """``open_root`` opens the kernel's root directory (see ``workspace``) and returns
        the descriptor, which the collector closes."""
        self._open_root = open_root
        self._limits = limits
        self._seen: dict[str, tuple[int, int, int]] = {}

    def collect(self) -> Collected:
        """The files under ``outputs/`` new or changed since the last collection."""
        found: list[RunFile] = []
        omitted = 0
        collected = skipped = total = 0
        limits = self._limits
        for name, entry in self._walk():
            if entry is None:
                omitted += 1
                continue
            fd, info, problem = entry
            key = (info.st_ino, info.st_size, info.st_mtime_ns)
            if problem is None and self._seen.get(name) == key:
                _close(fd)
                continue
            reason = problem
            data: bytes | None = None
            if reason is None:
                if collected >= limits.max_files:
                    reason = f"more than max_output_files={limits.max_files} files"
                elif info.st_size > limits.max_file_bytes:
                    reason = f"larger than max_output_file_bytes={limits.max_file_bytes}"
                elif total + info.st_size > limits.max_total_bytes:
                    reason = (f"the run's files together would pass "
                              f"max_output_total_bytes={limits.max_total_bytes}")
            if reason is None and fd is not None:
                data = _read_bounded(fd, min(limits.max_file_bytes,
                                             limits.max_total_bytes - total))
                if data is None:
                    reason = "it grew past the cap while being read"
            _close(fd)
            if data is None:
                skipped += 1
                if skipped > MAX_LISTED_SKIPPED:
                    omitted += 1
                    continue
                found.append(RunFile(name=name, size=info.st_size, mime_type=guess_mime(name),
                                     not_collected=reason or "not readable"))
                continue
            collected += 1
            total += len(data)
            self._seen[name] = key
            found.append(RunFile(name=name, size=len(data), mime_type=guess_mime(name),
                                 data=data))
        return Collected(tuple(found), omitted)

    def empty(self) -> bool:
        """Whether ``outputs/`` holds nothing (or is missing): a few system calls, cheap
        enough for the event loop, so a run that wrote no file skips :meth:`collect`."""
        try:
            root = self._open_root()
        except OSError:
            return True
        outputs = None
        try:
            work = _open_dir(root, "work")
            outputs = None if work is None else _open_dir(work, OUTPUTS_DIR)
            _close(work)
            if outputs is None:
                return True
            try:
                return not os.listdir(outputs)
            except OSError:
                return False  # let the collection say what it can
        finally:
            _close(outputs)
            os.close(root)

    def _walk(self) -> Iterator[tuple[str, tuple[int | None, os.stat_result, str | None]
                                      | None]]:
        """``(name, (fd, stat, problem))`` per entry below ``outputs/`` in name order, ``fd``
        open on a regular file that is safe to read (else ``None`` and ``problem`` says
        why); ``(name, None)`` for an entry past the scan budget."""
        try:
            root = self._open_root()
        except OSError:
            return
        try:
            work = _open_dir(root, "work")
            outputs = None if work is None else _open_dir(work, OUTPUTS_DIR)
            _close(work)
            if outputs is None:
                return
            budget = [MAX_SCANNED]
            yield from self._walk_dir(outputs, PurePosixPath(), 0, budget)
        finally:
            os.close(root)

    def _walk_dir(self, fd: int, prefix: PurePosixPath, depth: int, budget: list[int]
                  ) -> Iterator[tuple[str, tuple[int | None, os.stat_result, str | None]
                                      | None]]:
        try:
            try:
                names = sorted(os.listdir(fd))
            except OSError:
                return
            for entry_name in names:
                name = str(prefix / entry_name)
                if budget[0] <= 0:
                    yield name, None
                    continue
                budget[0] -= 1
                try:
                    info = os.stat(entry_name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone meanwhile
                if stat.S_ISDIR(info.st_mode):
                    if depth + 1 > MAX_DEPTH:
                        yield name, (None, info, f"deeper than {MAX_DEPTH} directories")
                        continue
                    child = _open_dir(fd, entry_name)
                    if child is not None:
                        yield from self._walk_dir(child, prefix / entry_name, depth + 1, budget)
                    continue
                yield name, _open_regular(fd, entry_name, info)
        finally:
            os.close(fd)


def _open_regular(dir_fd: int, name: str, listed: os.stat_result
                  ) -> tuple[int | None, os.stat_result, str | None]:
    """The file ``name`` opened for reading if it is a plain, singly linked regular file,
    the very one that was listed; else why not."""
    kind = _kind(listed.st_mode)
    if kind is not None:
        return None, listed, f"a {kind}, not a regular file"
    if listed.st_nlink != 1:
        return None, listed, "it has other hard links"
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        why = "a symbolic link" if error.errno == errno.ELOOP else os.strerror(error.errno or 0)
        return None, listed, f"not readable ({why})"
    opened = os.fstat(fd)
    if (not stat.S_ISREG(opened.st_mode) or opened.st_ino != listed.st_ino
            or opened.st_dev != listed.st_dev or opened.st_nlink != 1):
        os.close(fd)
        return None, listed, "it was replaced while being collected"
    return fd, opened, None


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "symbolic link (not followed)"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device or special file"


def _open_dir(dir_fd: int, name: str) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _read_bounded(fd: int, cap: int) -> bytes | None:
    """At most ``cap`` bytes of ``fd``; ``None`` if there are more."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, min(_READ_CHUNK, cap + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            return None


def guess_mime(name: str) -> str:
    """The MIME type a file's name suggests (``application/octet-stream`` if none)."""
    guessed, _encoding = mimetypes.guess_type(name, strict=False)
    return guessed or "application/octet-stream"
