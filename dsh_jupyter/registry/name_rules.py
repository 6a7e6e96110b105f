"""Policies by tool name: deny, ask or allow per ``fnmatch`` pattern, as a pre-execute hook.

``dsh-jupyter serve-mcp --policy FILE`` reads them from a small TOML or JSON file::

    # policy.toml
    deny = ["git_reset", "delete_*"]
    ask = ["git_commit", "write_*", "edit_*"]
    allow = []              # exceptions when default is "ask" or "deny"
    default = "allow"       # for a tool no list names

A call's tool name is matched against ``deny``, then ``ask``, then ``allow`` (so a deny
wins over everything, as in most permission files); the first list with a matching
pattern decides, else ``default``. Patterns are ``fnmatch`` patterns, case-sensitive
(``*``, ``?``, ``[abc]``). ``run_code`` itself is never matched: the rules judge the
calls a program makes, one by one, exactly as they judge direct calls.

As a hook (:meth:`NameRules.hook`) the rules only ever tighten: ``deny`` denies whatever
was decided before it, ``ask`` asks unless an earlier hook denied, ``allow`` keeps the
decision so far, so a file never lets through what the registry's own hooks stop.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal, TypeAlias

from ..errors import RegistrationError
from .execution import ToolExecution
from .policy import Ask, Deny, PreDecision, PreExecuteHook
from .scope import RESERVED_NAME

__all__ = ["NameRules", "PolicyFileError", "read_name_rules"]

Action: TypeAlias = Literal["allow", "ask", "deny"]
_ACTIONS: tuple[Action, ...] = ("deny", "ask", "allow")  # the order rules are matched in
_KEYS = (*_ACTIONS, "default")


class PolicyFileError(RegistrationError):
    """A policy file that cannot be read or says something the rules cannot mean."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NameRules:
    """Which tools are denied, asked about or allowed, by name pattern."""

    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    default: Action = "allow"

    def action(self, name: str) -> tuple[Action, str | None]:
        """What the rules say of ``name``, and the pattern that said it (``None``: the
        default)."""
        for action in _ACTIONS:
            for pattern in getattr(self, action):
                if fnmatchcase(name, pattern):
                    return action, pattern
        return self.default, None

    def unmatched(self, names: Iterable[str]) -> list[tuple[Action, str]]:
        """The patterns that match none of ``names`` (a typo, or a tool the server lacks)."""
        names = list(names)
        return [(action, pattern) for action in _ACTIONS for pattern in getattr(self, action)
                if not any(fnmatchcase(name, pattern) for name in names)]

    def hook(self) -> PreExecuteHook:
        """A pre-execute hook applying the rules to every tool but ``run_code``."""

        def apply(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
            if execution.name == RESERVED_NAME:
                return None
            action, pattern = self.action(execution.name)
            rule = f"default {action!r}" if pattern is None else f"{action} {pattern!r}"
            if action == "deny":
                return Deny(f"{execution.name} is denied by the policy ({rule})")
            if action == "ask" and not isinstance(decision, Deny | Ask):
                return Ask(f"the policy asks before {execution.name} ({rule})")
            return None

        return apply


def read_name_rules(path: str | os.PathLike[str]) -> NameRules:
    """The rules in ``path``, a ``.toml`` or ``.json`` file (see the module docstring).

    Raises :class:`PolicyFileError` with one line naming the file and what is wrong.
    """
    where = f"policy file {os.fspath(path)}"
    suffix = Path(path).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise PolicyFileError(f"{where}: expected a .toml or a .json file")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PolicyFileError(f"{where}: cannot be read: {reason}") from None
    try:
        data: object = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if suffix == ".toml" else "JSON"
        raise PolicyFileError(f"{where}: not valid {kind}: {exc}") from None
    try:
        return _rules(data)
    except ValueError as exc:
        raise PolicyFileError(f"{where}: {exc}") from None


def _rules(data: object) -> NameRules:
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a table of rules (deny, ask, allow, default), "
                         f"got {_kind(data)}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (expected {', '.join(_KEYS)})")
    default = data.get("default", "allow")
    if default not in _ACTIONS:
        raise ValueError(f"default must be \"allow\", \"ask\" or \"deny\", got {default!r}")
    lists = {action: _patterns(action, data.get(action, [])) for action in _ACTIONS}
    return NameRules(deny=lists["deny"], ask=lists["ask"], allow=lists["allow"],
                     default=default)


def _patterns(action: str, value: object) -> tuple[str, ...]:
    example = f'{action} = ["git_*", "write_file"]'
    if not isinstance(value, list):
        raise ValueError(f"{action} must be a list of tool-name patterns, e.g. {example}; "
                         f"got {_kind(value)}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{action} must list tool-name patterns (non-empty strings), "
                             f"e.g. {example}; got {item!r}")
    return tuple(value)


def _kind(value: object) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"
