"""Moved to :mod:`dsh_jupyter.codemode.run_files`; this module keeps the old import path working.

Code Mode is its own package now (:mod:`dsh_jupyter.codemode`), which the registry core
does not import; only this re-export does. No warning is emitted: import from the new
home in new code.
"""

from ..codemode.run_files import (
    CARD_FILE_BYTES,
    CARD_TOTAL_BYTES,
    FILES_HEADING,
    PREVIEW_BYTES,
    PREVIEW_LINES,
    card_entries,
    file_entries,
    file_lines,
    files_instructions,
    is_text,
)

__all__ = [
    "CARD_FILE_BYTES",
    "CARD_TOTAL_BYTES",
    "FILES_HEADING",
    "PREVIEW_BYTES",
    "PREVIEW_LINES",
    "card_entries",
    "file_entries",
    "file_lines",
    "files_instructions",
    "is_text",
]
