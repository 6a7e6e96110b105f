"""Large values as frames: arguments and return values whose JSON is over
:data:`FRAME_BYTES` travel as a sequence of frames, so that no message is large and the
host can build the value a frame at a time without holding its event loop."""

from __future__ import annotations

from typing import Any

from .values import JsonValue, compact_json

FRAME_BYTES = 64 * 1024  # ~3 ms to apply on the host, ~10 ms at worst
STRING_PIECE = FRAME_BYTES // 8  # characters: escaped, at most 6 bytes each


def frame_texts(value: JsonValue) -> list[str]:
    """``value`` as frames: JSON arrays of operations, each about :data:`FRAME_BYTES` at
    most, that the host applies in order to rebuild it::

        ["v", X]     a complete value        ["a"] / ["o"]  open an array / object
        ["e", [..]]  more array elements     ["m", {..}]    more object members
        ["k", K]     the next member's key   ["c"]          close the open container
        ["s", S]     a piece of a long string, ended by ["t"] (a value) or ["K"] (a key)

    Containers too big for one frame are opened, filled with slices that fit (their
    size found by halving), and closed; serialising a slice is C work, so a flat list of
    millions of numbers costs little more than one ``json.dumps``."""
    frames: list[str] = []
    ops: list[str] = []
    used = 0

    def put(op: str) -> None:
        nonlocal used
        if ops and used + len(op) + 1 > FRAME_BYTES:
            frames.append("[" + ",".join(ops) + "]")
            ops.clear()
            used = 0
        ops.append(op)
        used += len(op) + 1

    def put_string(text: str, end: str) -> None:
        for start in range(0, len(text), STRING_PIECE):
            put('["s",' + compact_json(text[start:start + STRING_PIECE]) + "]")
        put(end)

    # A task: ("v", value) | ("op", text) | ("e", list, start, size) | ("m", items, start, size)
    tasks: list[tuple[Any, ...]] = [("v", value)]
    while tasks:
        task = tasks.pop()
        kind = task[0]
        if kind == "op":
            put(task[1])
        elif kind == "v":
            item = task[1]
            text = compact_json(item)
            if len(text) <= FRAME_BYTES:
                put('["v",' + text + "]")
            elif type(item) is str:
                put_string(item, '["t"]')
            elif type(item) is list:
                put('["a"]')
                tasks += [("op", '["c"]'), ("e", item, 0, 1024)]
            else:
                put('["o"]')
                tasks += [("op", '["c"]'), ("m", list(item.items()), 0, 1024)]
        else:
            _, items, start, size = task
            if start >= len(items):
                continue
            chunk = items[start:start + size]
            text = compact_json(chunk if kind == "e" else dict(chunk))
            if len(text) <= FRAME_BYTES:
                put(f'["{kind}",' + text + "]")
                grown = size * 2 if len(text) < FRAME_BYTES // 2 else size
                tasks.append((kind, items, start + len(chunk), grown))
            elif size > 1:
                tasks.append((kind, items, start, size // 2))
            elif kind == "e":  # one element too big: build it in place, then go on
                tasks += [(kind, items, start + 1, 1), ("v", items[start])]
            else:
                key, member = items[start]
                tasks += [(kind, items, start + 1, 1), ("v", member)]
                key_text = compact_json(key)
                if len(key_text) <= FRAME_BYTES:
                    tasks.append(("op", '["k",' + key_text + "]"))
                else:
                    put_string(key, '["K"]')
    if ops:
        frames.append("[" + ",".join(ops) + "]")
    return frames
