"""Lossless JSON snapshots and the stack-safe encoder."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from dsh_jupyter.json_value import (
    FrozenDict,
    FrozenList,
    NotJsonError,
    dump_json,
    is_json_integer,
    snapshot_json,
    thaw,
)


def deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def test_snapshot_is_frozen_and_detached() -> None:
    source = {"a": [1, {"b": "c"}]}
    snap = snapshot_json(source)
    assert isinstance(snap, FrozenDict) and isinstance(snap["a"], FrozenList)
    source["a"].append(2)  # type: ignore[attr-defined]
    assert snap == {"a": [1, {"b": "c"}]}
    with pytest.raises(TypeError):
        snap["a"] = 1  # type: ignore[index]
    thawed = thaw(snap)
    thawed["a"] = 1  # type: ignore[index]
    assert json.loads(json.dumps(snap)) == {"a": [1, {"b": "c"}]}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"x": math.nan}, '"x" is NaN'),
        ({"x": [math.inf]}, '"x[0]" is infinite'),
        ({"x": -0.0}, '"x" is -0.0'),
        ({"x": (1, 2)}, '"x" is a tuple'),
        ({"x": {"y": b"raw"}}, '"x.y" is a bytes'),
        ({1: "a"}, "non-string key"),
    ],
)
def test_not_lossless_json_names_the_path(value: Any, path: str) -> None:
    with pytest.raises(NotJsonError, match=path.replace("[", r"\[").replace("]", r"\]")):
        snapshot_json(value)


def test_cycles_are_rejected_but_shared_subtrees_are_fine() -> None:
    shared = [1]
    assert snapshot_json({"a": shared, "b": shared}) == {"a": [1], "b": [1]}
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(NotJsonError, match="cycle"):
        snapshot_json(cyclic)


def test_json_number_semantics() -> None:
    assert is_json_integer(1) and is_json_integer(1.0)
    assert not is_json_integer(True) and not is_json_integer(1.5)
    assert snapshot_json(True) is True


def test_five_thousand_levels_snapshot_and_dump() -> None:
    value = deep_list(5000)
    snap = snapshot_json(value)
    text = dump_json(snap)
    assert text == "[" * 5001 + "]" * 5001
    assert dump_json(snap, indent=2).count("\n") <= 12  # deep levels are compact


def test_dump_matches_json_module() -> None:
    value = {"a": [1, 2.5, None, True, "é\"\n"], "b": {}, "c": []}
    assert json.loads(dump_json(value)) == value
    assert dump_json(value, indent=2) == json.dumps(value, indent=2, ensure_ascii=False)
