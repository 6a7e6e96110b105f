"""The ``tools`` namespace of a run: one :class:`Tool` per binding, reached as
``tools.name(...)`` or ``tools["any-name"](...)``, plus the helper methods the host names.

Inside the program::

    hits = await tools.search({"query": "kernels"})      # attribute access
    page = await tools["fetch-page"](url=hits[0]["url"])  # any binding name, keywords
    try:
        await tools.delete({"id": 1})
    except ToolCallError as error:
        print(error.tool_name, error.message)
    await tools.delete(1)  # TypeError: tools.delete takes one dict of arguments: ...

Under discovery the host also names *helpers* (``{method: binding}``): methods of
``tools`` whose positional arguments become the binding's object, per
:data:`HELPER_PARAMETERS`: ``await tools.search("kernels", limit=5)`` calls binding
``tools.search`` with ``{"query": "kernels", "limit": 5}``. A helper's binding is not a
tool of ``tools``, and a tool the helper's name shadows stays reachable by subscript.
"""

from __future__ import annotations

import keyword
import unicodedata
from collections.abc import Mapping

from .call_client import CallClient
from .values import JsonValue


class Tool:
    """One binding: ``await tool({...})`` with one dict, or ``await tool(key=value, ...)``.
    Any other call (``tool(1, 2)``, ``tool([1])``, a dict and keywords) calls nothing and
    raises ``TypeError`` showing how to call it: ``signature`` is the argument dict as the
    host describes it (``{"a": int}``), ``label`` how the program reaches the tool."""

    __slots__ = ("_client", "_describe", "_label", "_signature", "name")

    def __init__(self, client: CallClient, name: str, *, signature: str | None = None,
                 label: str | None = None, describe: bool = False) -> None:
        self._client = client
        self.name = name
        self._signature = signature
        self._label = label or f"tools[{_quoted(name)}]"
        self._describe = describe

    async def __call__(self, *args: JsonValue, **kwargs: JsonValue) -> JsonValue:
        if not args:
            return await self._client.call(self.name, kwargs)
        if len(args) == 1 and not kwargs and (args[0] is None or isinstance(args[0], dict)):
            return await self._client.call(self.name, {} if args[0] is None else args[0])
        if len(args) == 1 and not kwargs and self._signature is None and not self._describe:
            return await self._client.call(self.name, args[0])  # a plain binding: any JSON
        raise TypeError(self.usage())

    def usage(self) -> str:
        """One line: the tool takes one dict, and the dict it takes."""
        text = (f"{self._label} takes one dict of arguments: "
                f"await {self._label}({self._signature or '{...}'})")
        if self._describe and self._signature is None:
            text += f"; tools.describe({_quoted(self.name)}) shows its fields"
        return text

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"


def _quoted(text: str) -> str:
    """A string literal for ``text``, double-quoted where that needs no escapes (as the SDK
    writes names)."""
    literal = repr(text)
    return f'"{literal[1:-1]}"' if literal[0] == "'" and '"' not in text else literal


def _attribute_name(name: str) -> bool:
    """Whether the SDK writes ``name`` as ``tools.name`` (else ``tools["name"]``)."""
    return (name.isidentifier() and not keyword.iskeyword(name)
            and not keyword.issoftkeyword(name) and not name.startswith("_")
            and unicodedata.normalize("NFKC", name) == name)


HELPER_PARAMETERS: dict[str, tuple[str, ...]] = {
    "search": ("query", "limit"),
    "describe": ("name",),
}
"""The helpers this module knows, and their parameters in positional order."""


class Helper:
    """A helper method of ``tools`` (``tools.search("words", limit=5)``): its arguments,
    positional or by keyword, become the argument object of its binding."""

    __slots__ = ("_binding", "_client", "_parameters", "name")

    def __init__(self, client: CallClient, name: str, binding: str) -> None:
        self._client = client
        self._binding = binding
        self._parameters = HELPER_PARAMETERS[name]
        self.name = name

    async def __call__(self, *args: JsonValue, **kwargs: JsonValue) -> JsonValue:
        usage = f"tools.{self.name}({', '.join(self._parameters)})"
        if len(args) > len(self._parameters):
            raise TypeError(f"{usage} takes at most {len(self._parameters)} arguments")
        values: dict[str, JsonValue] = dict(zip(self._parameters, args, strict=False))
        for key, value in kwargs.items():
            if key not in self._parameters or key in values:
                raise TypeError(f"{usage}: unexpected or repeated argument {key!r}")
            values[key] = value
        return await self._client.call(self._binding, values)

    def __repr__(self) -> str:
        return f"<tools.{self.name}({', '.join(self._parameters)})>"


class Tools:
    """The ``tools`` namespace of one run: ``tools.name(...)`` or ``tools["any-name"](...)``,
    plus the run's helper methods (``tools.search``, ``tools.describe``) if any."""

    __slots__ = ("_helpers", "_tools")

    def __init__(self, client: CallClient, names: list[str],
                 helpers: Mapping[str, str] | None = None,
                 signatures: Mapping[str, str] | None = None) -> None:
        helpers = {name: binding for name, binding in (helpers or {}).items()
                   if name in HELPER_PARAMETERS}
        bindings = set(helpers.values())
        signatures = signatures or {}
        self._tools = {
            name: Tool(client, name, signature=signatures.get(name),
                       label=f"tools.{name}" if _attribute_name(name)
                       and name not in helpers else None, describe="describe" in helpers)
            for name in names if name not in bindings}
        self._helpers = {name: Helper(client, name, binding)
                         for name, binding in helpers.items()}

    def __getitem__(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            raise KeyError(self._unknown(name))
        return tool

    def __getattr__(self, name: str) -> Tool | Helper:
        if name.startswith("__"):
            raise AttributeError(name)
        helper = self._helpers.get(name)
        if helper is not None:
            return helper
        tool = self._tools.get(name)
        if tool is None:
            raise AttributeError(self._unknown(name))
        return tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __dir__(self) -> list[str]:
        return sorted({*self._tools, *self._helpers})

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._tools)) or 'none'}>"

    def _unknown(self, name: str) -> str:
        if "search" in self._helpers:  # a catalog too big to list: point at the search
            return (f"no tool named {name!r} in this run; tools.search('words') finds "
                    "tools, tools.describe(name) shows how to call one")
        known = ", ".join(repr(n) for n in sorted(self._tools)) or "none"
        return f"no tool named {name!r} in this run; known tools: {known}"
