"""Moved: prompt assembly's types are in :mod:`dsh_jupyter.registry.assembly`, Code Mode's
sections in :mod:`dsh_jupyter.codemode.prompt`; this module keeps the old import path
working (no warning: import from the new homes in new code).
"""

from ..codemode.prompt import (
    CODE_ONLY_RULE,
    FRESH_RUNS,
    SDK_RENDERERS,
    STATEFUL_RUNS,
    SdkRenderer,
    renderer_for,
    run_code_schema,
    runs_text,
    sdk_section,
)
from .assembly import PromptAssembly, PromptSection

__all__ = [
    "CODE_ONLY_RULE",
    "FRESH_RUNS",
    "SDK_RENDERERS",
    "STATEFUL_RUNS",
    "PromptAssembly",
    "PromptSection",
    "SdkRenderer",
    "renderer_for",
    "run_code_schema",
    "runs_text",
    "sdk_section",
]
