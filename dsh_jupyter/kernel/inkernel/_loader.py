"""Loading the in-kernel package from its sources (standard library only).

A kernel need not have dsh-jupyter installed, so the package reaches it as text: the
setup cell carries this file's source and the package's (``(name, source)`` pairs in
:data:`MODULES` order) and calls :func:`load`. The fork server loads this file by path and
calls :func:`load` once, before it forks; ``dsh_jupyter.kernel.InProcessRuntime`` calls
it in the host. Every module is compiled under one file name, the one whose frames the
program's tracebacks leave out (``program.SOURCE_FILENAME``).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable

MODULES = ("messages", "values", "frames", "outputs", "call_client", "tools", "program",
           "shortcuts", "runner", "__init__")
"""The package's modules, each after those it imports; ``__init__``, the package, last."""


def sources(directory: str | None = None) -> list[tuple[str, str]]:
    """The package's ``(name, source)`` pairs, in :data:`MODULES` order."""
    directory = directory or os.path.dirname(os.path.abspath(__file__))
    found: list[tuple[str, str]] = []
    for name in MODULES:
        with open(os.path.join(directory, name + ".py"), encoding="utf-8") as file:
            found.append((name, file.read()))
    return found


def load(package: str, sources: Iterable[tuple[str, str]], filename: str) -> types.ModuleType:
    """Execute ``sources`` as the package ``package`` (its submodules registered in
    ``sys.modules``, so their relative imports find each other) and return it."""
    root = types.ModuleType(package)
    root.__path__ = []
    root.__package__ = package
    sys.modules[package] = root
    for name, source in sources:
        module = root
        if name != "__init__":
            module = types.ModuleType(f"{package}.{name}")
            module.__package__ = package
            sys.modules[module.__name__] = module
            setattr(root, name, module)
        exec(compile(source, filename, "exec"), module.__dict__)
    return root
