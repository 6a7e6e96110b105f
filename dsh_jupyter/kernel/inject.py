"""The host's side of the in-kernel module: its source, and the cells that call it.

``_inkernel.py`` is sent to a kernel *as source* and executed there as the module
:data:`~._inkernel.MODULE_NAME`, compiled under the file name
:data:`~._inkernel.SOURCE_FILENAME` (whose frames tracebacks then leave out). The
host imports ``_inkernel`` only for those names: the module defines functions,
classes and constants and does nothing when imported.

A stock or gateway kernel gets the source in its setup cell; a forked kernel
already holds the module (the fork server loaded it from :data:`SOURCE_PATH`), so
its setup cell only calls ``start``. Either way the module's ``runtime`` is then
what :func:`program_cell` awaits.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from . import _inkernel
from ._inkernel import MODULE_NAME, SOURCE_FILENAME

SOURCE_PATH: Final = Path(_inkernel.__file__)
"""The file whose source every kernel runs (standard library plus ``comm``)."""

_SETUP_CELL: Final = f"""\
def __dsh_setup(source, carrier):
    import sys, types
    module = types.ModuleType({MODULE_NAME!r})
    sys.modules[module.__name__] = module
    exec(compile(source, {SOURCE_FILENAME!r}, "exec"), module.__dict__)
    module.runtime = module.start(carrier)

try:
    __dsh_setup(%r, %r)
finally:
    del __dsh_setup
"""
_PRELOADED_SETUP_CELL: Final = (
    f"__import__('sys').modules[{MODULE_NAME!r}].runtime = "
    f"__import__('sys').modules[{MODULE_NAME!r}].start(%r)"
)


@functools.cache
def inkernel_source() -> str:
    """The source of ``_inkernel.py`` (read once, when the first kernel needs it)."""
    return SOURCE_PATH.read_text(encoding="utf-8")


def setup_cell(carrier: tuple[str, str] | None, *, preloaded: bool) -> str:
    """The cell that starts the in-kernel runtime (``start(carrier)``): it opens the tools
    comm and, given ``(path, token)``, connects to the host's socket carrier. Unless
    ``preloaded``, it first executes the module's source."""
    if preloaded:
        return _PRELOADED_SETUP_CELL % (carrier,)
    return _SETUP_CELL % (inkernel_source(), carrier)


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
    return (f"await __import__('sys').modules[{MODULE_NAME!r}].runtime.run("
            f"{sorted(names)!r}, {program!r}, {max_output_bytes!r}{extra})")
