"""Lossless JSON snapshots and the stack-safe encoder."""

from __future__ import annotations

import enum
import json
import math
from json.encoder import encode_basestring
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import examples

from dsh_jupyter.json_dump import dump_json
from dsh_jupyter.json_value import (
    _CHUNK,
    _CHUNK_CHARS,
    FrozenDict,
    FrozenList,
    JsonValue,
    NotJsonError,
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
    source["a"].append(2)
    assert snap == {"a": [1, {"b": "c"}]}
    with pytest.raises(TypeError):
        snap["a"] = 1
    thawed = thaw(snap)
    assert isinstance(thawed, dict)
    thawed["a"] = 1
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


def test_max_depth_refuses_deeper_values_without_walking_them() -> None:
    assert snapshot_json(deep_list(10), max_depth=11) == deep_list(10)
    with pytest.raises(NotJsonError, match="nested more than 10 levels deep"):
        snapshot_json(deep_list(10), max_depth=10)
    with pytest.raises(NotJsonError, match=r"^the value is nested more than 3 levels"):
        snapshot_json({"a": [{"b": [[1]]}]}, max_depth=3)


def test_a_frozen_value_is_its_own_snapshot() -> None:
    """A sub-call's arguments pass several stages that snapshot them: once frozen they
    are taken as they are (walked once), and a thawed copy is still a copy."""
    frozen = snapshot_json({"a": [1, {"b": "c"}]})
    assert snapshot_json(frozen) is frozen and isinstance(frozen, FrozenDict)
    assert snapshot_json(frozen["a"]) is frozen["a"]
    thawed = snapshot_json(frozen, freeze=False)
    assert thawed == frozen and thawed is not frozen and type(thawed) is dict


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
    value: JsonValue = {"a": [1, 2.5, None, True, "é\"\n"], "b": {}, "c": []}
    assert json.loads(dump_json(value)) == value
    assert dump_json(value, indent=2) == json.dumps(value, indent=2, ensure_ascii=False)


# --- dump_json against the walk it replaced -----------------------------------------------


def reference_dump(value: Any, *, indent: int | None = None, compact_depth: int = 5) -> str:
    """The node-by-node walk ``dump_json`` used before it wrote runs with the C encoder:
    the oracle for its text and its errors."""
    out: list[str] = []
    stack: list[Any] = [(value, 0)]
    pretty = indent is not None
    while stack:
        work = stack.pop()
        if isinstance(work, str):
            out.append(work)
            continue
        node, depth = work
        if isinstance(node, str):
            out.append(encode_basestring(node))
        elif node is None:
            out.append("null")
        elif node is True:
            out.append("true")
        elif node is False:
            out.append("false")
        elif isinstance(node, int | float):
            if isinstance(node, float):
                if node != node or node in (math.inf, -math.inf):
                    raise NotJsonError("", "contains NaN or Infinity, which is not lossless JSON")
                out.append(float.__repr__(node))
            else:
                out.append(int.__repr__(node))
        elif isinstance(node, dict | list):
            is_dict = isinstance(node, dict)
            open_, close = ("{", "}") if is_dict else ("[", "]")
            items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
            if not node:
                out.append(open_ + close)
                continue
            if pretty and depth < compact_depth:
                assert indent is not None
                inner = "\n" + " " * (indent * (depth + 1))
                outer = "\n" + " " * (indent * depth)
                sep = "," + inner
            else:
                inner = outer = ""
                sep = ", " if pretty else ","
            pieces: list[Any] = [open_ + inner]
            for i, (key, child) in enumerate(items):
                if i:
                    pieces.append(sep)
                if is_dict:
                    pieces.append(encode_basestring(key) + (": " if pretty else ":"))
                pieces.append((child, depth + 1))
            pieces.append(outer + close)
            stack.extend(reversed(pieces))
        else:
            raise NotJsonError("", f"contains a {type(node).__name__}, which is not a JSON value")
    return "".join(out)


def outcome(dump: Any, value: Any, **layout: Any) -> tuple[str, str]:
    try:
        return ("text", dump(value, **layout))
    except (NotJsonError, TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


LAYOUTS = st.fixed_dictionaries({"indent": st.sampled_from([None, 0, 1, 2, 4]),
                                 "compact_depth": st.integers(0, 7)})
SCALARS = (st.none() | st.booleans() | st.integers(-(10**40), 10**40)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
# Runs and rows are what the encoder batches: lists of scalars, lists of flat objects.
ROWS = st.lists(st.dictionaries(st.text(max_size=3), SCALARS, min_size=1, max_size=3),
                min_size=2, max_size=4)
JSON = st.recursive(
    SCALARS | ROWS,
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=4), kids,
                                                            max_size=5),
    max_leaves=60)


class Text(str):
    pass


class Count(enum.IntEnum):
    ONE = 1


ODD = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, (1, 2), b"raw", 1j, Text("t\n"),
                       Count.ONE, True]) | st.builds(lambda: 10**5000)
ODD_JSON = st.recursive(
    SCALARS | ODD,
    lambda kids: (st.lists(kids, max_size=4)
                  | st.dictionaries(st.text(max_size=3) | st.sampled_from([Text("k"), 1]),
                                    kids, max_size=4)
                  | st.lists(st.dictionaries(st.text(max_size=2), kids, min_size=1,
                                             max_size=2), min_size=2, max_size=3)),
    max_leaves=30)


@settings(max_examples=examples(300), deadline=None)
@given(value=JSON, layout=LAYOUTS)
def test_dump_writes_what_the_walk_wrote(value: Any, layout: dict[str, Any]) -> None:
    text = reference_dump(value, **layout)
    assert dump_json(value, **layout) == text
    if layout["indent"] is not None:  # default_render: json.dumps's text, fully expanded
        assert (dump_json(value, indent=layout["indent"], compact_depth=1000)
                == json.dumps(value, indent=layout["indent"], ensure_ascii=False))
    try:
        frozen = snapshot_json(value)
    except NotJsonError:  # -0.0: written, but not lossless
        return
    assert dump_json(frozen, **layout) == text


@settings(max_examples=examples(300), deadline=None)
@given(value=ODD_JSON, layout=LAYOUTS)
def test_dump_fails_and_writes_subclasses_like_the_walk(value: Any,
                                                        layout: dict[str, Any]) -> None:
    assert outcome(dump_json, value, **layout) == outcome(reference_dump, value, **layout)


def row(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"row {i}\u00e9", "score": i / 7, "ok": i % 2 == 0, "none": None}


@pytest.mark.parametrize("name", ["scalars", "nan late", "container late", "rows", "long rows",
                                  "big object", "big object of rows", "long string"])
@pytest.mark.parametrize("layout", [{"indent": 2, "compact_depth": 5}, {"indent": None},
                                    {"indent": 2, "compact_depth": 1}])
def test_dump_of_values_longer_than_a_chunk(name: str, layout: dict[str, Any]) -> None:
    n = 2 * _CHUNK + 3
    value: Any = {
        "scalars": [i if i % 3 else f"s{i}" for i in range(n)],
        "nan late": [*range(_CHUNK + 5), math.nan, 1],
        "container late": [*range(_CHUNK + 5), [1, {"a": []}], *range(10)],
        "rows": [row(i) for i in range(n // 4)],
        "long rows": [[*range(_CHUNK // 2)] for _ in range(5)],
        "big object": {f"k{i}": i for i in range(n)},
        "big object of rows": {"rows": [row(i) for i in range(500)],
                               **{f"k{i}": [i] for i in range(n)}},
        "long string": ["\"\n\u2028é" * (_CHUNK_CHARS // 3), "x" * (_CHUNK_CHARS + 1)],
    }[name]
    assert outcome(dump_json, value, **layout) == outcome(reference_dump, value, **layout)
    if name != "nan late":
        assert json.loads(dump_json(value, **layout)) == value


def test_dump_at_any_depth_matches_the_walk() -> None:
    value = deep_list(3000)
    cast(list[Any], value[0][0])[:] = [row(1), row(2), [1, 2], "x"]
    for layout in ({"indent": 2, "compact_depth": 5}, {"indent": None},
                   {"indent": 1, "compact_depth": 2000}):
        assert dump_json(value, **layout) == reference_dump(value, **layout)


# --- snapshots of values longer than a chunk ----------------------------------------------


def test_snapshot_of_long_containers_is_frozen_and_names_problems() -> None:
    numbers = [*range(_CHUNK * 2), 0.5]
    snap = snapshot_json({"numbers": numbers, "object": {f"k{i}": i for i in range(_CHUNK + 1)}})
    assert isinstance(snap, FrozenDict)
    assert isinstance(snap["numbers"], FrozenList) and snap["numbers"] == numbers
    assert isinstance(snap["object"], FrozenDict) and len(snap["object"]) == _CHUNK + 1
    thawed = thaw(snap)
    assert isinstance(thawed, dict) and type(thawed["numbers"]) is list
    with pytest.raises(NotJsonError, match=r'"x\[40001\]" is NaN'):
        snapshot_json({"x": [*range(_CHUNK * 2 + 1), math.nan]})
    with pytest.raises(NotJsonError, match=r'"\[1\]\[20005\]" is -0.0'):
        snapshot_json([[1], [*(0.5 for _ in range(_CHUNK + 5)), -0.0]])
