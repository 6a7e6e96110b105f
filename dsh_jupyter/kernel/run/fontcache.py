"""matplotlib's font list, built once and copied into every kernel's workspace.

matplotlib keeps the fonts it found in ``fontlist-v<version>.json`` under its cache
directory and scans every system font to build that file when it is missing. A
kernel's HOME is a fresh workspace, so without help every program that imports
``matplotlib.pyplot`` would scan the fonts again: ~0.4 s per run on a machine with
38 fonts, seconds with thousands (``docs/kernel-runtime.md`` has the figures).

So a runtime copies the host's font list (matplotlib's own cache directory,
computed as matplotlib does: ``$MPLCONFIGDIR``, else ``$XDG_CACHE_HOME/matplotlib``,
else ``~/.cache/matplotlib``) into its *seed home*, whose files every workspace's
HOME starts with (see ``workspace``). Each kernel gets its own copy, so nothing one
program writes reaches another. When the host has no font list yet and matplotlib is
installed, it is built once, in a child process, exactly as the host's first
``import matplotlib`` would build it. Nothing here imports matplotlib, and kernels
never preload it.

A font list names font files; a confined kernel sees the system's fonts and
matplotlib's own (read-only), but not fonts in the host user's home: if a program
asks for one of those, matplotlib notices the missing file and scans again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

FONT_LIST_PATTERN: Final = "fontlist-v*.json"
MAX_FONT_LIST_BYTES: Final = 16 * 1024 * 1024
BUILD_SECONDS: Final = 120.0
CACHE_IN_HOME: Final = Path(".cache", "matplotlib")
"""Where a kernel's matplotlib looks for its cache, relative to its HOME."""


def matplotlib_cache_directory(env: Mapping[str, str] | None = None) -> Path:
    """The cache directory matplotlib uses with ``env`` (default: this process's)."""
    env = os.environ if env is None else env
    configured = env.get("MPLCONFIGDIR")
    if configured:
        return Path(configured)
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "matplotlib"


def font_lists(directory: Path) -> list[Path]:
    """The font lists in ``directory`` (regular files of a sane size)."""
    found: list[Path] = []
    try:
        candidates = sorted(directory.glob(FONT_LIST_PATTERN))
    except OSError:
        return found
    for path in candidates:
        try:
            if path.is_file() and not path.is_symlink() and \
                    path.stat().st_size <= MAX_FONT_LIST_BYTES:
                found.append(path)
        except OSError:
            continue
    return found


@functools.cache
def _build_host_font_list() -> None:
    """Let matplotlib build the host's font list (once per process, if installed)."""
    if importlib.util.find_spec("matplotlib") is None:
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        # -P: a matplotlib.py in the host's working directory is not what runs.
        subprocess.run([sys.executable, "-P", "-c", "import matplotlib.font_manager"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=BUILD_SECONDS, check=False)


def seed_font_cache(seed_home: Path, *, build: bool = True,
                    source: Path | None = None) -> list[Path]:
    """Copy the host's font lists (those in ``source``, default matplotlib's cache
    directory) into ``seed_home``; when there are none, build them first (if ``build``).
    The copies made. Never raises for a missing or unwritable cache."""
    source = matplotlib_cache_directory() if source is None else source
    lists = font_lists(source)
    if not lists and build:
        _build_host_font_list()
        lists = font_lists(source)
    target = seed_home / CACHE_IN_HOME
    copied: list[Path] = []
    for path in lists:
        destination = target / path.name
        partial = destination.with_name(destination.name + ".partial")
        try:
            target.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.copyfile(path, partial)
            os.replace(partial, destination)  # a workspace made meanwhile copies all or none
        except OSError:
            continue
        copied.append(destination)
    return copied
