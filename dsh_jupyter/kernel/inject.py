"""The host's side of the in-kernel package: its sources, and the cells that call it.

The package ``inkernel/`` is sent to a kernel *as source* and executed there as the
package :data:`MODULE_NAME` by ``inkernel/_loader.py`` (every module compiled under the
file name :data:`~.inkernel.program.SOURCE_FILENAME`, whose frames tracebacks then leave
out). The host imports ``inkernel`` for its message shapes and a few names: its modules
define functions, classes and constants and do nothing when imported.

A stock or gateway kernel gets the loader's and the package's sources in its setup cell;
a forked kernel already holds the package (the fork server loaded it with the loader at
:data:`LOADER_PATH`), so its setup cell only calls ``start``. Either way the package's
``runtime`` is then what :func:`program_cell` awaits.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from .inkernel import _loader
from .inkernel.program import SOURCE_FILENAME
from .inkernel.shortcuts import RUN_MARK

MODULE_NAME: Final = "_dsh_jupyter_inkernel"
"""The in-kernel package's name in a kernel's ``sys.modules``."""
LOADER_PATH: Final = Path(_loader.__file__)
"""The loader of the package every kernel runs (standard library plus ``comm``)."""

_SETUP_CELL: Final = f"""\
def __dsh_setup(loader, sources, carrier):
    namespace = {{}}
    exec(compile(loader, {SOURCE_FILENAME!r}, "exec"), namespace)
    package = namespace["load"]({MODULE_NAME!r}, sources, {SOURCE_FILENAME!r})
    package.runtime = package.start(carrier)

try:
    __dsh_setup(%r, %r, %r)
finally:
    del __dsh_setup
"""
_PRELOADED_SETUP_CELL: Final = (
    f"__import__('sys').modules[{MODULE_NAME!r}].runtime = "
    f"__import__('sys').modules[{MODULE_NAME!r}].start(%r)"
)


@functools.cache
def loader_source() -> str:
    """The source of ``inkernel/_loader.py`` (read once, when the first kernel needs it)."""
    return LOADER_PATH.read_text(encoding="utf-8")


@functools.cache
def inkernel_sources() -> tuple[tuple[str, str], ...]:
    """The package's ``(module, source)`` pairs in loading order (read once)."""
    return tuple(_loader.sources())


def setup_cell(carrier: tuple[str, str] | None, *, preloaded: bool) -> str:
    """The cell that starts the in-kernel runtime (``start(carrier)``): it opens the tools
    comm and, given ``(path, token)``, connects to the host's socket carrier. Unless
    ``preloaded``, it first loads the package from its sources."""
    if preloaded:
        return _PRELOADED_SETUP_CELL % (carrier,)
    return _SETUP_CELL % (loader_source(), list(inkernel_sources()), carrier)


def program_cell(names: Iterable[str], program: str, max_output_bytes: int,
                 helpers: Mapping[str, str] | None = None, *, keep: bool = False,
                 signatures: Mapping[str, str] | None = None) -> str:
    """The one line of cell code that runs ``program`` through the injected runtime;
    ``helpers`` (``{method: binding}``) become methods of ``tools``; ``keep`` (a stateful
    session) keeps the program's top-level names for the session's next runs;
    ``signatures`` (``{binding: argument dict}``) are shown to a program that calls a
    binding wrongly."""
    extra = f", {dict(sorted(helpers.items()))!r}" if helpers else ""
    if keep:
        extra += ", keep=True"
    if signatures:
        extra += f", signatures={dict(sorted(signatures.items()))!r}"
    return (f"{RUN_MARK}await __import__('sys').modules[{MODULE_NAME!r}].runtime.execute("
            f"{sorted(names)!r}, {program!r}, {max_output_bytes!r}{extra})")
