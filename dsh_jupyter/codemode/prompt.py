"""Code Mode's prompt sections, for the registry's prompt assembly
(:func:`dsh_jupyter.registry.assembly.assemble`).

- ``code``: section ``tools:code-only`` (order 99) says only ``run_code`` may be called
  directly, and ``tools:sdk`` (order 150) carries the usage instructions and the
  generated SDK.
- ``both``: the same, with ``tools:code-only`` empty.
- ``discovery``: as ``code``, but ``tools:sdk`` carries a short index of the tools
  instead of the SDK module; programs find and type tools with ``tools.search`` and
  ``tools.describe`` (:mod:`~dsh_jupyter.codemode.discovery`). The section keeps its id
  and place, so accounting counts it as the SDK it replaces.
- A code runtime with input files (:class:`~dsh_jupyter.runtime.RuntimeInputs`, e.g.
  ``KernelRuntimeConfig(inputs=...)``) adds section ``tools:files`` (order 160) naming
  them and ``outputs/``; without inputs there is no such section.

Code modes need a code runtime whose language has an SDK renderer; otherwise
assembly fails loudly with :class:`~dsh_jupyter.errors.CodeModeError`.

The instructions say how runs behave: each in a fresh kernel (the fixed text, unchanged),
or, when the runtime is stateful (:func:`~dsh_jupyter.runtime.runtime_is_stateful`), that
what a program defines persists into the conversation's later runs (:data:`STATEFUL_RUNS`
replaces the fresh-run sentence).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..errors import CodeModeError
from ..json_value import JsonObject, thaw
from ..registry.assembly import PromptSection
from ..registry.scope import RESERVED_NAME, AgentScope, PresentationMode
from ..runtime import input_names, runtime_is_stateful
from .discovery import DISCOVERY_RULE, Catalog, discovery_instructions
from .run_code import RUN_CODE_DESCRIPTION, RUN_CODE_PARAMETERS
from .run_files import files_instructions
from .sdk_python import SdkTool, python_sdk_instructions, render_python_sdk

if TYPE_CHECKING:
    from ._view import CodeModeHost

SdkRenderer = Callable[[Iterable[SdkTool]], str]
SDK_RENDERERS: dict[str, tuple[Callable[[], str], SdkRenderer]] = {
    "python": (python_sdk_instructions, render_python_sdk),
}

CODE_ONLY_RULE = (
    "Only `run_code` may be called directly. Every other tool is reachable only from "
    "inside a `run_code` program, through the `tools` SDK described below."
)


FRESH_RUNS = (
    "Every run starts in a fresh kernel: nothing carries over from earlier runs.",  # SDK
    "Every run starts fresh.",  # discovery
)
"""The fresh-run sentences of the fixed instructions, as they read there."""

STATEFUL_RUNS = (
    "Runs of this conversation share one kernel: variables, functions and imports a "
    "program defines at top level are still there in later `run_code` calls, so reuse "
    "them instead of recomputing. The user may reset them, and a run the runtime has to "
    "stop (a timeout, a limit, a crash) loses them (its error says so): define them again."
)
"""What the instructions say instead on a stateful runtime."""


def run_code_schema() -> JsonObject:
    return {"name": RESERVED_NAME, "description": RUN_CODE_DESCRIPTION,
            "parameters": thaw(RUN_CODE_PARAMETERS)}


def code_sections(registry: CodeModeHost, scope: AgentScope | None, mode: PresentationMode,
                  catalog: Callable[[AgentScope | None], Catalog]) -> list[PromptSection]:
    """The sections of a code mode for ``scope`` (see the module docstring)."""
    if mode == "discovery":
        sdk = discovery_section(registry, scope, catalog)
        rule = PromptSection(id="tools:code-only", order=99, text=DISCOVERY_RULE)
    else:
        sdk = sdk_section(registry, scope)
        rule = PromptSection(id="tools:code-only", order=99,
                             text=CODE_ONLY_RULE if mode == "code" else "")
    sections = [rule, sdk]
    inputs = input_names(registry.code_runtime)
    if inputs:
        sections.append(PromptSection(id="tools:files", order=160,
                                      text=files_instructions(inputs)))
    return sections


def sdk_section(registry: CodeModeHost, scope: AgentScope | None, *,
                language: str | None = None) -> PromptSection:
    """The ``tools:sdk`` section: instructions plus the SDK for the scope's tools, in
    the code runtime's language (or ``language``, to preview without a runtime)."""
    instructions, render = renderer_for(registry, language)
    tools = [SdkTool(name=d.name, description=d.description, parameters=d.parameters,
                     output=d.output.schema)
             for name, d in sorted(registry.visible(scope).items()) if name != RESERVED_NAME]
    text = f"{runs_text(registry, instructions())}\n\n```python\n{render(tools)}```"
    return PromptSection(id="tools:sdk", order=150, text=text)


def discovery_section(registry: CodeModeHost, scope: AgentScope | None,
                      catalog: Callable[[AgentScope | None], Catalog]) -> PromptSection:
    """The ``tools:sdk`` section under ``discovery``: the fixed instructions, then the
    index of the scope's tools (deterministic: it changes only with the tools)."""
    renderer_for(registry)  # the same loud failure as code mode without a runtime
    language = registry.code_runtime.language if registry.code_runtime is not None else None
    if language != "python":  # describe shows the Python SDK
        raise CodeModeError(f"discovery needs a Python code runtime; this one runs {language!r}")
    text = f"{runs_text(registry, discovery_instructions())}\n\n{catalog(scope).index()}"
    return PromptSection(id="tools:sdk", order=150, text=text)


def runs_text(registry: CodeModeHost, instructions: str) -> str:
    """``instructions`` as they are for a stateless runtime; on a stateful one, with
    :data:`STATEFUL_RUNS` for the fresh-run sentence."""
    if not runtime_is_stateful(registry.code_runtime):
        return instructions
    for sentence in FRESH_RUNS:
        if sentence in instructions:
            return instructions.replace(sentence, STATEFUL_RUNS, 1)
    return f"{instructions}\n\n{STATEFUL_RUNS}"


def renderer_for(registry: CodeModeHost,
                 language: str | None = None) -> tuple[Callable[[], str], SdkRenderer]:
    runtime = registry.code_runtime
    if language is None:
        if runtime is None:
            raise CodeModeError(
                "Code Mode needs a code runtime: `async with KernelRuntime() as runtime:` (from "
                "dsh_jupyter.kernel), then ToolRegistry(code_runtime=runtime, ...); or use "
                "mode='native'")
        language = runtime.language
    if language not in SDK_RENDERERS:
        raise CodeModeError(
            f"the code runtime's language {language!r} has no SDK renderer; "
            f"available: {', '.join(sorted(SDK_RENDERERS))}")
    return SDK_RENDERERS[language]
