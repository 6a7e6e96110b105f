"""``ToolRegistry``: the registry core with Code Mode plugged in, as users make it.

:class:`~dsh_jupyter.registry.core.RegistryCore` holds tools, scopes, policies, listeners
and the pipeline; this adds Code Mode's settings (the constructor arguments below) and
plugs :class:`~dsh_jupyter.codemode.mode.CodeMode` into it. ``dsh_jupyter.ToolRegistry``
and ``dsh_jupyter.registry.ToolRegistry`` are this class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RegistrationError
from ..registry.core import RegistryCore
from .mode import CodeMode

if TYPE_CHECKING:
    from ..registry.policy import ApprovalService
    from ..registry.scope import PresentationMode
    from ..runtime import CodeRuntime


class ToolRegistry(RegistryCore):
    """Tools, agent scopes, policies, and the execution pipeline.

    ``mode`` says how tools are presented (``native``, ``code``, ``both``, ``discovery``);
    the code modes run programs on ``code_runtime``, overlapping at most
    ``max_parallel_sub_calls`` concurrency-safe sub-calls. ``run_code_images=True`` makes
    a ``run_code`` result also carry the program's PNG and JPEG displays (its matplotlib
    figures, say) as image content for the model, at most four (see
    ``docs/code-mode.md``); off by default.

    ::

        registry = ToolRegistry()

        @registry.tool
        async def add(a: int, b: int) -> int:
            return a + b

        result = await registry.execute(ToolCall(call_id="c1", name="add",
                                                 arguments={"a": 1, "b": 2}))
        assert result.value == 3
    """

    def __init__(
        self,
        *,
        mode: PresentationMode = "native",
        max_parallel_sub_calls: int = 10,
        code_runtime: CodeRuntime | None = None,
        approval: ApprovalService | None = None,
        run_code_images: bool = False,
    ) -> None:
        super().__init__(mode=mode, approval=approval)
        if (isinstance(max_parallel_sub_calls, bool) or not isinstance(max_parallel_sub_calls, int)
                or max_parallel_sub_calls < 1):
            raise RegistrationError(
                f"max_parallel_sub_calls must be a positive integer (1 runs sub-calls one at a "
                f"time), got {max_parallel_sub_calls!r}")
        if not isinstance(run_code_images, bool):
            raise RegistrationError(f"run_code_images must be True or False, got "
                                    f"{run_code_images!r}")
        self.run_code_images = run_code_images
        self.max_parallel_sub_calls = max_parallel_sub_calls
        self.code_runtime = code_runtime
        self._code_mode = CodeMode(self)
