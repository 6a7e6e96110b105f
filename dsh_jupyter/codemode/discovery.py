"""Discovery: Code Mode for catalogs too large to print, found and typed on demand.

Under ``mode="discovery"`` (or ``scope.present_as("discovery")``) the model gets
``run_code`` as in ``code``, but the prompt carries a short index of the visible tools
instead of the whole SDK. A program finds what it needs with two helpers on ``tools``:

- ``await tools.search("query", limit=10)``: ranked ``[{"name", "description"}]``;
- ``await tools.describe("name")``: that tool's part of the full SDK (its argument and
  output ``TypedDict``\\ s and its ``Tools`` member), byte-identical to what the full SDK
  rendered for the same visible tools holds;

then calls the tool as usual (``await tools.name({...})``), through the whole pipeline.

The helpers are not tools: no policy sees them, no event records them, they consume no
sub-call id. They only read what the calling scope may see, frozen when the run
started (the same set that decides which tools the program can call), so ``restrict``
and ``present_as`` keep deciding what exists: a masked tool is neither found, described
nor callable. They reach the program as two extra *bindings* whose names no visible
tool has (:attr:`Catalog.helpers`); the kernel module turns them into the methods.

Everything here is deterministic: the index depends only on the visible tools (sorted,
no timestamps, no counts of calls), so it stays in a provider's prompt cache while the
catalog does; search ties break by name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..json_value import JsonValue
from ..registry.definition import ToolDefinition
from ..runtime import BindingError
from .sdk_python import SdkParts, SdkTool, python_sdk_parts

if TYPE_CHECKING:
    from ..registry.scope import AgentScope

HELPERS = ("describe", "search")
"""The helper methods discovery adds to ``tools``; a tool with one of these names is
called by subscript, ``tools["search"]({...})`` (its ``describe`` says so)."""

INDEX_BUDGET_BYTES = 2048
"""The most bytes of index the prompt carries: the most detailed form that fits is used."""

SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
SUMMARY_CHARS = 100
"""A search hit's description: the first sentence of the tool's, at most this long."""

_INDEX_SUMMARY_CHARS = 60
_SEPARATOR = re.compile(r"[_.\-/:]")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
# BM25 constants (the usual ones); a name's words count _NAME_WEIGHT times: a word in a
# tool's name says more about it than the same word in its description.
_K1, _B, _NAME_WEIGHT = 1.2, 0.75, 3

DISCOVERY_RULE = (
    "Only `run_code` may be called directly. Every other tool is reachable only from "
    "inside a `run_code` program: find it with `tools.search`, read its types with "
    "`tools.describe`, then call it."
)

_INSTRUCTIONS = """\
## Writing code for run_code

`run_code` takes `code` — the body of an async Python function (top-level `await` and \
`return` work; `asyncio`, `tools` and `ToolCallError` are defined) — and `description`, a \
short summary of the program. Every run starts fresh. Only what the program prints or \
returns comes back to you.

The tools are too many to list with their types. Find and type them from a program:

- `await tools.search("words", limit=10)` returns `[{"name", "description"}]`, best first.
- `await tools.describe("name")` returns the tool's Python signature: `TypedDict`s for its \
arguments and result, and its `Tools` method.
- Call a tool as `await tools.name({...})` with a plain dict, or `await tools["name"]({...})` \
for any name. It returns plain JSON values. A failed call raises `ToolCallError` \
(`.tool_name`, `.message`).

Search and describe first, print what you learn, then call; or do all in one program."""


def discovery_instructions() -> str:
    """The fixed usage text (markdown) shown before the index."""
    return _INSTRUCTIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry:
    tool: SdkTool
    summary: str
    terms: Counter[str]
    length: int


class Catalog:
    """The tools one scope sees, as discovery presents and searches them.

    :meth:`index` is the prompt's text; :meth:`search` and :meth:`describe` answer the
    helpers. Code Mode keeps one per scope until a registration changes what it sees
    (:class:`Catalogs`); the full SDK that ``describe`` cuts is rendered once.

    Example::

        >>> tool = SdkTool(name="read_file", description="Read a text file.",
        ...                parameters={"type": "object"}, output={"type": "string"})
        >>> Catalog([tool]).search("read a file")
        [{'name': 'read_file', 'description': 'Read a text file.'}]
    """

    __slots__ = ("_average_length", "_document_frequency", "_entries", "_parts", "tools")

    def __init__(self, tools: Iterable[SdkTool]) -> None:
        unique: dict[str, SdkTool] = {}
        for tool in sorted(tools, key=lambda t: (t.name, t.description)):
            unique.setdefault(tool.name, tool)
        self.tools = tuple(unique.values())
        self._entries: dict[str, _Entry] = {}
        self._document_frequency: Counter[str] = Counter()
        for tool in self.tools:
            terms = Counter(_terms(tool.name) * _NAME_WEIGHT + _terms(tool.description))
            self._entries[tool.name] = _Entry(
                tool=tool, summary=_summary(tool.description, SUMMARY_CHARS), terms=terms,
                length=sum(terms.values()))
            self._document_frequency.update(set(terms))
        lengths = [entry.length for entry in self._entries.values()]
        self._average_length = max(1.0, sum(lengths) / len(lengths)) if lengths else 1.0
        self._parts: SdkParts | None = None

    def __repr__(self) -> str:
        return f"<Catalog of {len(self.tools)} tools>"

    # The prompt -----------------------------------------------------------------------
    def index(self, budget: int = INDEX_BUDGET_BYTES) -> str:
        """The index: one line per tool under its group when that fits in ``budget``
        bytes, else the names by group, else only the groups and their sizes."""
        groups = _groups(self.tools)
        if not groups:
            return "No tools are available."
        head = f"The available tools ({len(self.tools)}"
        head += f", {len(groups)} groups" if len(groups) > 1 else ""
        head += "):"
        forms = (_per_tool_lines(groups), _names_by_group(groups), _group_sizes(groups))
        for lines in forms:
            text = "\n".join([head, *lines])
            if len(text.encode()) <= budget:
                return text
        return text  # the group sizes even over budget: the smallest honest index

    # The helpers ----------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def search(self, query: str, limit: int = SEARCH_LIMIT) -> list[dict[str, str]]:
        """``[{"name", "description"}]`` of the tools best matching ``query``, best first
        (see :meth:`ranked`); the description is the first sentence of the tool's."""
        return [{"name": name, "description": self._entries[name].summary}
                for name in self.ranked(query, limit)]

    def ranked(self, query: str, limit: int = SEARCH_LIMIT) -> list[str]:
        """The names of the tools best matching ``query``, best first: a name made of
        exactly the query's words, then BM25 over the words of each tool's name (counted
        three times) and description, ties by name; tools sharing no word with the query
        are left out."""
        wanted = set(_terms(query))
        count = len(self._entries)
        scored: list[tuple[bool, float, str]] = []
        for name, entry in self._entries.items():
            score = 0.0
            for term in wanted & entry.terms.keys():
                frequency = entry.terms[term]
                documents = self._document_frequency[term]
                idf = math.log(1 + (count - documents + 0.5) / (documents + 0.5))
                norm = _K1 * (1 - _B + _B * entry.length / self._average_length)
                score += idf * frequency * (_K1 + 1) / (frequency + norm)
            if score > 0:
                # A name made of exactly the query's words comes first (``read file`` is
                # ``read_file`` before ``fs_read_file``). Rounded: sums in another order
                # must not reorder equal scores.
                exact = set(_terms(entry.tool.name)) == wanted
                scored.append((not exact, -round(score, 9), name))
        scored.sort()
        return [name for _, _, name in scored[:limit]]

    def describe(self, name: str) -> str:
        """``name``'s part of the full SDK for this catalog (rendered once, on first use)."""
        if name not in self._entries:
            close = self.ranked(name, 3)
            hint = f"; similar: {', '.join(close)}" if close else ""
            raise BindingError(f"no tool named {name!r} in this run{hint} "
                               "(tools.search finds tools by words)")
        if self._parts is None:
            self._parts = python_sdk_parts(self.tools, attribute_names=HELPERS)
        return next(part for part in self._parts.tools if part.name == name).text()

    def answer(self, helper: str, args: JsonValue) -> JsonValue:
        """Run helper ``helper`` with the arguments a program sent (checked here: they
        come from model-written code)."""
        params = args if isinstance(args, dict) else {}
        if helper == "search":
            query, limit = params.get("query"), params.get("limit", SEARCH_LIMIT)
            if not isinstance(query, str):
                raise BindingError("tools.search(query, limit=10): query must be a string")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise BindingError("tools.search(query, limit=10): limit must be a positive "
                                   "integer")
            return [{"name": hit["name"], "description": hit["description"]}
                    for hit in self.search(query, min(limit, MAX_SEARCH_LIMIT))]
        name = params.get("name")
        if not isinstance(name, str):
            raise BindingError("tools.describe(name): name must be a string")
        return self.describe(name)


def helper_bindings(taken: Iterable[str]) -> dict[str, str]:
    """``{helper: binding name}``: ``tools.search`` and ``tools.describe``, prefixed with
    ``$`` until no name in ``taken`` (the visible tools) has them."""
    names = set(taken)
    out: dict[str, str] = {}
    for helper in HELPERS:
        binding = f"tools.{helper}"
        while binding in names:
            binding = "$" + binding
        out[helper] = binding
    return out


def catalog_of(definitions: Iterable[ToolDefinition]) -> Catalog:
    """The catalog of registry definitions."""
    return Catalog(SdkTool(name=d.name, description=d.description, parameters=d.parameters,
                           output=d.output.schema) for d in definitions)


class CatalogSource(Protocol):
    """What :class:`Catalogs` reads of the registry."""

    def visible(self, scope: AgentScope | None = None) -> Mapping[str, ToolDefinition]:
        """Every tool ``scope`` can see, by name."""

    @property
    def _version(self) -> int:
        """Bumped on every change."""


class Catalogs:
    """The catalog of each scope, built when asked and kept until the registry changes
    (any change empties the cache: a disposed scope's catalog goes with it)."""

    __slots__ = ("_cache", "_registry", "_version")

    def __init__(self, registry: CatalogSource) -> None:
        self._registry = registry
        self._version = -1
        self._cache: dict[AgentScope | None, Catalog] = {}

    def __call__(self, scope: AgentScope | None) -> Catalog:
        version = self._registry._version
        if version != self._version:
            self._cache.clear()
            self._version = version
        catalog = self._cache.get(scope)
        if catalog is None:
            catalog = self._cache[scope] = catalog_of(self._registry.visible(scope).values())
        return catalog


# --- index forms -----------------------------------------------------------------------

_Groups = list[tuple[str, list[SdkTool]]]


def _groups(tools: Iterable[SdkTool]) -> _Groups:
    """Tools by their name's prefix up to the first ``_ . - / :`` (where ``connect_mcp``'s
    ``prefix`` ends up), e.g. ``fs_``; names no other tool shares a prefix with go to a
    last group, ``other``, with an empty prefix."""
    by_prefix: dict[str, list[SdkTool]] = {}
    for tool in tools:
        found = _SEPARATOR.search(tool.name)
        prefix = tool.name[: found.end()] if found and 0 < found.end() < len(tool.name) else ""
        by_prefix.setdefault(prefix, []).append(tool)
    groups: _Groups = []
    rest: list[SdkTool] = by_prefix.pop("", [])
    for prefix in sorted(by_prefix):
        members = by_prefix[prefix]
        if len(members) > 1:
            groups.append((prefix, members))
        else:
            rest += members
    if rest:
        groups.append(("", sorted(rest, key=lambda t: t.name)))
    return groups


def _label(prefix: str) -> str:
    return prefix or "other"


def _per_tool_lines(groups: _Groups) -> list[str]:
    lines = []
    for prefix, members in groups:
        lines.append(f"{_label(prefix)} ({len(members)}):")
        for tool in members:
            summary = _summary(tool.description, _INDEX_SUMMARY_CHARS)
            lines.append(f"- {tool.name}: {summary}" if summary else f"- {tool.name}")
    return lines


def _names_by_group(groups: _Groups) -> list[str]:
    lines = ["(a group lists its tools' names after its prefix)"] if groups[0][0] else []
    return lines + [f"{_label(prefix)} ({len(members)}): "
                    f"{', '.join(t.name[len(prefix):] for t in members)}"
                    for prefix, members in groups]


def _group_sizes(groups: _Groups) -> list[str]:
    return [f"{_label(prefix)} ({len(members)})" for prefix, members in groups]


# --- words -------------------------------------------------------------------------------

def _terms(text: str) -> list[str]:
    """Lower-case words of ``text``: ``readFile``, ``read_file`` and ``Read files`` all
    give ``read``, ``file`` (a plural ``s`` is dropped; one-letter words are not words)."""
    out = []
    for word in _WORD.findall(text):
        word = word.lower()
        if len(word) > 3 and word.endswith("ies"):
            word = word[:-3] + "y"
        elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if len(word) > 1:
            out.append(word)
    return out


def _summary(description: str, limit: int) -> str:
    """The first sentence of ``description`` on one line, cut to ``limit`` characters."""
    text = " ".join(description.split())
    text = _SENTENCE_END.split(text, 1)[0] if text else ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
