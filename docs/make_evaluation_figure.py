"""Regenerate docs/img/evaluation-matrix.png and the per-cell table of
docs/evaluation.md from the recorded runs: ``python docs/make_evaluation_figure.py``.

The shipped ``office`` set, every presentation, three repeats (so the tasks with
several recorded samples replay each), with programs run in-process: the figures
depend only on the recordings, the tools and the prompt/SDK text, not on the
runtime. Tokens are estimates (recordings carry no server counts).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from dsh_jupyter.evaluation import load_task_set, run_evaluation
from dsh_jupyter.evaluation.report import save_matrix_plot

FIGURE = Path(__file__).resolve().parent / "img" / "evaluation-matrix.png"
REPEATS = 3


async def main() -> None:
    task_set = load_task_set("office")
    evaluation = await run_evaluation(task_set, modes=["native", "code", "both", "discovery"],
                                      repeats=REPEATS, runtime="in-process")
    summary = evaluation.summary()
    save_matrix_plot(summary, FIGURE, title=f"office: {len(task_set.tasks)} tasks x "
                     f"{REPEATS} repeats, recorded responses")
    print(f"wrote {FIGURE}\n")
    print("| cell | succeeded | success (95 % CI) | pass@1 | pass@3 | steps | tool calls "
          "| sub-calls | result bytes | request bytes | tokens (est.) per run |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in summary:
        print(f"| {c.cell} | {c.succeeded}/{c.runs} | {c.success_rate:.1%} "
              f"({c.ci_low:.1%}-{c.ci_high:.1%}) | {c.pass_at_1:.3f} | {c.pass_at_k:.3f} "
              f"| {c.steps:,} | {c.tool_calls:,} | {c.sub_calls:,} | {c.tool_result_bytes:,} "
              f"| {c.request_bytes:,} | {c.tokens_per_run:,.0f} |")


if __name__ == "__main__":
    asyncio.run(main())
