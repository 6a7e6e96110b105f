"""Moved to :mod:`dsh_jupyter.codemode.run_code`; this module keeps the old import path working.

Code Mode is its own package now (:mod:`dsh_jupyter.codemode`), which the registry core
does not import; only this re-export does. No warning is emitted: import from the new
home in new code.
"""

from ..codemode.run_code import (
    CAPTURED_OUTPUT,
    MODEL_IMAGE_TYPES,
    NO_OUTPUT,
    RUN_CODE_DESCRIPTION,
    RUN_CODE_MAX_IMAGES,
    RUN_CODE_OUTPUT,
    RUN_CODE_PARAMETERS,
    failure_message,
    model_images,
    present_run_code,
    render_result_value,
    run_code_definition,
)

__all__ = [
    "CAPTURED_OUTPUT",
    "MODEL_IMAGE_TYPES",
    "NO_OUTPUT",
    "RUN_CODE_DESCRIPTION",
    "RUN_CODE_MAX_IMAGES",
    "RUN_CODE_OUTPUT",
    "RUN_CODE_PARAMETERS",
    "failure_message",
    "model_images",
    "present_run_code",
    "render_result_value",
    "run_code_definition",
]
