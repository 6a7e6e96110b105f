"""How a registry and its scopes show in a notebook: a compact HTML table (tools with
their signatures, the mode, the policies, the scopes) and a one-line text fallback.

Everything shown is escaped; nothing here runs a tool or a hook.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .definition import ToolDefinition
    from .policy import HookChain

_HOOK_LABELS = (("guards", "guard"), ("pre", "pre-execute"), ("wrappers", "execute wrapper"),
                ("post", "post-execute"), ("observers", "result observer"))


def signature(definition: ToolDefinition) -> str:
    """``name(path: string, offset?: integer)`` from the parameters schema."""
    schema: Mapping[str, Any] = definition.parameters
    properties = schema.get("properties")
    required = set(schema.get("required", ()))
    parts = []
    if isinstance(properties, Mapping):
        for name, sub in properties.items():
            kind = sub.get("type", "any") if isinstance(sub, Mapping) else "any"
            if isinstance(kind, list):
                kind = " | ".join(map(str, kind))
            parts.append(f"{name}{'' if name in required else '?'}: {kind}")
    return f"{definition.name}({', '.join(parts)})"


def policies(hooks: HookChain) -> str:
    """``2 pre-execute, 1 guard`` (or ``none``)."""
    counts = [(len(getattr(hooks, field)), label) for field, label in _HOOK_LABELS]
    shown = [f"{n} {label}{'s' if n > 1 else ''}" for n, label in counts if n]
    return ", ".join(shown) or "none"


def table_html(title: str, mode: str, tools: Mapping[str, ToolDefinition], hooks: HookChain,
               scopes: list[str]) -> str:
    escape = html.escape
    rows = "".join(
        f"<tr><td style='text-align:left'><code>{escape(signature(d))}</code></td>"
        f"<td style='text-align:left'>{escape(_first_line(d.description))}</td>"
        f"<td>{'parallel' if d.is_concurrency_safe is not None else ''}</td></tr>"
        for _, d in sorted(tools.items()))
    empty = "<tr><td colspan='3'><em>no tools</em></td></tr>"
    facts = [f"mode <b>{escape(mode)}</b>", f"{len(tools)} tool{'s' * (len(tools) != 1)}",
             f"policies: {escape(policies(hooks))}"]
    if scopes:
        facts.append("scopes: " + ", ".join(f"<code>{escape(s)}</code>" for s in scopes))
    return (f"<div class='dsh-registry'><b>{escape(title)}</b> · {' · '.join(facts)}"
            "<table><thead><tr><th style='text-align:left'>tool</th>"
            "<th style='text-align:left'>description</th><th>classifier</th></tr></thead>"
            f"<tbody>{rows or empty}</tbody></table></div>")


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= 100 else line[:99] + "…"
