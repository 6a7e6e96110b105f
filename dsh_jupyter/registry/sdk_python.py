"""Moved to :mod:`dsh_jupyter.codemode.sdk_python`; this module keeps the old import path working.

Code Mode is its own package now (:mod:`dsh_jupyter.codemode`), which the registry core
does not import; only this re-export does. No warning is emitted: import from the new
home in new code.
"""

from ..codemode.sdk_python import (
    SdkParts,
    SdkTool,
    SdkToolPart,
    argument_shape,
    json_schema_to_py,
    python_sdk_instructions,
    python_sdk_parts,
    render_python_sdk,
)

__all__ = [
    "SdkParts",
    "SdkTool",
    "SdkToolPart",
    "argument_shape",
    "json_schema_to_py",
    "python_sdk_instructions",
    "python_sdk_parts",
    "render_python_sdk",
]
