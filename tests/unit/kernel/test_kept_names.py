"""What a stateful session keeps of a program: the names its body binds at its own level
(``compile_program(keep=True)``), run here in the host on the in-kernel module's code."""

from __future__ import annotations

import asyncio
import builtins
from typing import Any

import pytest

from dsh_jupyter.kernel.inkernel.program import compile_program, format_exception


def run_kept(namespace: dict[str, Any], source: str) -> Any:
    exec(compile_program(source, keep=True), namespace)
    return asyncio.run(namespace.pop("<module>")())


def fresh_namespace() -> dict[str, Any]:
    return {"__name__": "__main__", "__builtins__": builtins, "asyncio": asyncio}


def test_top_level_names_persist_and_return_still_works() -> None:
    kept = fresh_namespace()
    assert run_kept(kept, (
        "import os.path\nfrom json import dumps as to_json\n"
        "total: int = 3\nlater: str\n"
        "for i in range(2):\n    pass\n"
        "with open(os.devnull) as sink:\n    pass\n"
        "def add(a, b=total):\n    inner = a + b\n    return inner\n"
        "class Box:\n    size: int = 2\n"
        "squares = [n * n for n in range(3)]\n"
        "found = [(last := n) for n in range(4)]\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError as error:\n    why = str(error)\n"
        "match {'k': [1, 2, 3]}:\n    case {'k': [first, *rest], **others}:\n        pass\n"
        "if total:\n    return 'first'\n")) == "first"
    assert run_kept(kept, (
        "return [os.path.sep, to_json(1), total, i, sink.closed, add(1), Box.size, squares,\n"
        "        last, why, first, rest, others]")) == [
        "/", "1", 3, 1, True, 4, 2, [0, 1, 4], 3, "division by zero", 1, [2, 3], {}]
    # Names local to nested scopes, comprehension variables, and `except` names stay local.
    leaked = run_kept(kept, "return [n for n in ('inner', 'n', 'error', 'later') "
                            "if n in globals()]")
    assert leaked == []


def test_deleting_and_rebinding_act_on_the_session() -> None:
    kept = fresh_namespace()
    run_kept(kept, "a = 1\nb = 2")
    run_kept(kept, "del a\nb += 40")
    assert "a" not in kept and kept["b"] == 42


def test_an_exception_keeps_earlier_names_and_the_programs_line_numbers() -> None:
    kept = fresh_namespace()
    with pytest.raises(KeyError) as raised:
        run_kept(kept, "early = 1\n\n{}['missing']\nlate = 2")
    assert kept["early"] == 1 and "late" not in kept
    assert 'File "<program>", line 3, in <module>' in format_exception(raised.value)


def test_without_keep_nothing_is_declared_global() -> None:
    namespace = fresh_namespace()
    exec(compile_program("x: int = 1\nreturn x"), namespace)
    assert asyncio.run(namespace.pop("<module>")()) == 1
    assert "x" not in namespace
