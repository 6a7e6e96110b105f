"""Moved to :mod:`dsh_jupyter.codemode.discovery`; this module keeps the old import path working.

Code Mode is its own package now (:mod:`dsh_jupyter.codemode`), which the registry core
does not import; only this re-export does. No warning is emitted: import from the new
home in new code.
"""

from ..codemode.discovery import (
    DISCOVERY_RULE,
    HELPERS,
    INDEX_BUDGET_BYTES,
    MAX_SEARCH_LIMIT,
    SEARCH_LIMIT,
    SUMMARY_CHARS,
    Catalog,
    catalog_of,
    discovery_instructions,
    helper_bindings,
)

__all__ = [
    "Catalog",
    "DISCOVERY_RULE",
    "HELPERS",
    "INDEX_BUDGET_BYTES",
    "MAX_SEARCH_LIMIT",
    "SEARCH_LIMIT",
    "SUMMARY_CHARS",
    "catalog_of",
    "discovery_instructions",
    "helper_bindings",
]
