"""Files in and out of a remote (gateway) kernel, through the kernel connection.

A gateway offers no file API, and a Kernel Gateway starts every kernel in its own
working directory, shared by all of them. So, before its run, a remote kernel gets one
more setup cell (:func:`prepare_remote`): it makes a private directory in the kernel's
temp directory, moves there, makes ``outputs/`` and writes the inputs (sent in the
cell, at most :data:`MAX_REMOTE_INPUT_BYTES` together) read-only under ``inputs/``.
The host keeps the directory's path, as the kernel reported it before the program ran.

After a successful run, before the kernel is deleted, :func:`collect_remote` runs a
cell that walks that directory's ``outputs/`` (regular files only, ``O_NOFOLLOW``,
within the caps) and sends each file as displays of :data:`FILE_MIME`, in chunks well
under the kernel's message limit. The kernel ran the program, so the host trusts none
of it: it checks each message's shape and name, and enforces the caps itself while it
assembles the bytes. A remote symlink can only reach files on the kernel's machine that
the program could read anyway, so nothing of the host's is at stake.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...runtime import RunFile
from ..transport.channels import KernelChannels
from .files import Collected, OutputLimits, guess_mime

MAX_REMOTE_INPUT_BYTES = 1024 * 1024
"""The inputs a remote kernel can get, together (sent inside one setup cell)."""
CHUNK_BYTES = 512 * 1024
"""Bytes of a file per display message (base64: ~683 KiB, under the 2 MiB message cap)."""
FILE_MIME = "application/x.dsh-file+json"
WORKDIR_MIME = "application/x.dsh-workdir+json"
COLLECT_SECONDS = 30.0


def remote_input_entries(inputs: Mapping[str, Path]) -> list[tuple[str, str | None]]:
    """``[(path below inputs/, base64 bytes or None for a directory)]``; ``ValueError``
    over :data:`MAX_REMOTE_INPUT_BYTES` or for a symlink inside an input directory."""
    entries: list[tuple[str, str | None]] = []
    total = 0

    def add_file(name: str, path: Path) -> None:
        nonlocal total
        total += path.stat().st_size
        if total > MAX_REMOTE_INPUT_BYTES:
            raise ValueError(
                f"inputs: remote kernels get their inputs through the kernel connection, at "
                f"most {MAX_REMOTE_INPUT_BYTES} bytes together; these pass it at {name!r}: "
                "put larger data on the gateway's side or serve it through a tool")
        entries.append((name, base64.b64encode(path.read_bytes()).decode("ascii")))

    for name, source in inputs.items():
        if not source.is_dir():
            add_file(name, source)
            continue
        entries.append((name, None))
        for directory, subdirectories, files in os.walk(source):
            subdirectories.sort()
            relative = Path(directory).relative_to(source)
            for child in (*sorted(subdirectories), *sorted(files)):
                path = Path(directory) / child
                target = f"{name}/{(relative / child).as_posix()}"
                if path.is_symlink():
                    raise ValueError(f"inputs: {target!r} is a symbolic link; remote kernels "
                                     "get regular files and directories only")
                if path.is_dir():
                    entries.append((target, None))
                else:
                    add_file(target, path)
    return entries


_SETUP = """
def __dsh_workdir(entries, mime):
    import base64, os, tempfile
    from IPython.display import publish_display_data
    work = tempfile.mkdtemp(prefix='dsh-run-')
    os.chdir(work)
    os.mkdir('outputs')
    if entries:
        os.mkdir('inputs')
        for name, data in entries:
            path = os.path.join('inputs', name)
            if data is None:
                os.makedirs(path, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'wb') as file:
                file.write(base64.b64decode(data))
        for directory, subdirectories, files in os.walk('inputs', topdown=False):
            for child in files + subdirectories:
                path = os.path.join(directory, child)
                os.chmod(path, os.stat(path).st_mode & ~0o222)
        os.chmod('inputs', 0o555)
    publish_display_data({mime: {'dir': work}})
__dsh_workdir(%s, %r)
del __dsh_workdir
"""

_COLLECT = """
def __dsh_collect(root, limits, chunk, mime):
    import base64, os, stat
    from IPython.display import publish_display_data
    max_file, max_files, max_total = limits
    count = total = 0
    def send(**fields):
        publish_display_data({mime: fields})
    outputs = os.path.join(root, 'outputs')
    if os.path.islink(outputs) or not os.path.isdir(outputs):
        return
    for directory, subdirectories, files in os.walk(outputs):
        subdirectories.sort()
        for child in sorted(files + [d for d in subdirectories
                                     if os.path.islink(os.path.join(directory, d))]):
            path = os.path.join(directory, child)
            name = os.path.relpath(path, outputs).replace(os.sep, '/')
            info = os.lstat(path)
            reason = None
            if not stat.S_ISREG(info.st_mode):
                reason = 'not a regular file'
            elif count >= max_files:
                reason = 'more than max_output_files=%%d files' %% max_files
            elif info.st_size > max_file:
                reason = 'larger than max_output_file_bytes=%%d' %% max_file
            elif total + info.st_size > max_total:
                reason = ("the run's files together would pass "
                          "max_output_total_bytes=%%d" %% max_total)
            if reason is not None:
                send(name=name, size=info.st_size, not_collected=reason)
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                sent = 0
                while sent <= info.st_size:
                    data = os.read(fd, chunk)
                    if not data:
                        break
                    send(name=name, chunk=base64.b64encode(data).decode('ascii'))
                    sent += len(data)
            finally:
                os.close(fd)
            send(name=name, size=sent, done=True)
            count += 1
            total += sent
__dsh_collect(%r, %r, %d, %r)
del __dsh_collect
"""


async def prepare_remote(connection: KernelChannels, inputs: Mapping[str, Path],
                         seconds: float) -> str:
    """Run the setup cell (see the module docstring); the kernel's private directory.
    Raises ``RuntimeError`` (the message says what failed) or ``TimeoutError``."""
    entries = await asyncio.to_thread(remote_input_entries, inputs)
    cell = _SETUP % (repr(entries), WORKDIR_MIME)
    found: list[str] = []

    def take(data: Any) -> None:
        if isinstance(data, dict) and isinstance(data.get("dir"), str) and not found:
            found.append(data["dir"])

    await _execute(connection, cell, WORKDIR_MIME, take, seconds)
    if not found:
        raise RuntimeError("the remote kernel did not report its working directory")
    return found[0]


async def collect_remote(connection: KernelChannels, workdir: str,
                         limits: OutputLimits, seconds: float = COLLECT_SECONDS) -> Collected:
    """The files under ``workdir/outputs`` of a remote kernel whose program has ended
    (see the module docstring). What arrived before a timeout or a failure is kept."""
    assembly = _Assembly(limits)
    cell = _COLLECT % (workdir, (limits.max_file_bytes, limits.max_files,
                                 limits.max_total_bytes), CHUNK_BYTES, FILE_MIME)
    with contextlib.suppress(RuntimeError, TimeoutError):
        await _execute(connection, cell, FILE_MIME, assembly.take, seconds)
    return assembly.result()


class _Assembly:
    """Files from untrusted messages, with the caps enforced here."""

    def __init__(self, limits: OutputLimits) -> None:
        self._limits = limits
        self._files: list[RunFile] = []
        self._names: set[str] = set()
        self._current: str | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._total = 0
        self._collected = 0
        self._over: str | None = None

    def take(self, data: Any) -> None:
        if not isinstance(data, dict) or not _valid_name(data.get("name")):
            return
        name: str = data["name"]
        if name in self._names:
            return
        if "not_collected" in data:
            self._names.add(name)
            reason = data.get("not_collected")
            self._files.append(RunFile(
                name=name, size=_count(data.get("size")), mime_type=guess_mime(name),
                not_collected=str(reason)[:200]))
            return
        if self._current not in (None, name):
            self._finish(self._current, complete=False)
        self._current = name
        chunk = data.get("chunk")
        if isinstance(chunk, str) and self._over is None:
            try:
                piece = base64.b64decode(chunk, validate=True)
            except (binascii.Error, ValueError):
                self._over = "it arrived damaged"
                return
            self._size += len(piece)
            limits = self._limits
            if self._size > limits.max_file_bytes:
                self._over = f"larger than max_output_file_bytes={limits.max_file_bytes}"
            elif self._total + self._size > limits.max_total_bytes:
                self._over = (f"the run's files together would pass "
                              f"max_output_total_bytes={limits.max_total_bytes}")
            elif self._collected >= limits.max_files:
                self._over = f"more than max_output_files={limits.max_files} files"
            else:
                self._chunks.append(piece)
        if data.get("done") is True:
            self._finish(name, complete=True)

    def _finish(self, name: str, *, complete: bool) -> None:
        reason = self._over or (None if complete else "it arrived incomplete")
        if reason is None and self._collected >= self._limits.max_files:
            reason = f"more than max_output_files={self._limits.max_files} files"
        self._names.add(name)
        if reason is None:
            data = b"".join(self._chunks)
            self._files.append(RunFile(name=name, size=len(data), mime_type=guess_mime(name),
                                       data=data))
            self._collected += 1
            self._total += len(data)
        else:
            self._files.append(RunFile(name=name, size=self._size, mime_type=guess_mime(name),
                                       not_collected=reason))
        self._current, self._chunks, self._size, self._over = None, [], 0, None

    def result(self) -> Collected:
        if self._current is not None:
            self._finish(self._current, complete=False)
        return Collected(tuple(sorted(self._files, key=lambda file: file.name)))


def _valid_name(name: object) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= 1024 and not name.startswith("/")
            and "\0" not in name and not any(part in ("", ".", "..")
                                             for part in name.split("/")))


def _count(value: object) -> int:
    """``value`` if it is a count (a non-negative int), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else 0


async def _execute(connection: KernelChannels, code: str, mime: str,
                   take: Any, seconds: float) -> None:
    """Run ``code``; hand every ``mime`` payload it displays to ``take``, until the kernel
    is idle again. ``RuntimeError`` if the cell failed."""
    request = connection.execute(code)
    error: str | None = None
    async with asyncio.timeout(seconds):
        while True:
            message = await connection.recv_iopub()
            if message is None or message.parent_id != request:
                continue
            content = message.content
            if message.msg_type == "display_data":
                data = content.get("data")
                if isinstance(data, dict) and mime in data:
                    take(data[mime])
            elif message.msg_type == "error":
                error = f"{content.get('ename')}: {content.get('evalue')}"
            elif (message.msg_type == "status"
                  and content.get("execution_state") == "idle"):
                break
    if error is not None:
        raise RuntimeError(error[:300])
