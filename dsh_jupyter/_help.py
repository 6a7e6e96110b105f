"""Module docstrings as ``--help`` text: the command line shows plain text, not RST."""

from __future__ import annotations

import re
import textwrap

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
WIDTH = 88


def plain_help(doc: str | None) -> str:
    """``doc`` without reStructuredText markup: ````x```` and ``:role:`x``` become ``x``,
    a paragraph's ``::`` becomes ``:`` (a ``::`` line alone is dropped), prose
    paragraphs are filled again to :data:`WIDTH` columns (indented blocks, such as
    example commands, keep their lines), and blank lines are never doubled."""
    text = _ROLE.sub(r"\1", doc or "").replace("``", "")
    blocks: list[list[str]] = [[]]
    for line in text.strip("\n").splitlines():
        if line.strip() == "::":
            continue
        line = line[:-1] if line.endswith("::") else line
        if not line.strip():
            if blocks[-1]:
                blocks.append([])
        else:
            blocks[-1].append(line)
    paragraphs = []
    for block in filter(None, blocks):
        if block[0].startswith(" "):
            paragraphs.append("\n".join(block))
        else:
            paragraphs.append(textwrap.fill(" ".join(line.strip() for line in block),
                                            WIDTH, break_on_hyphens=False,
                                            break_long_words=False))
    return "\n\n".join(paragraphs) + "\n"
