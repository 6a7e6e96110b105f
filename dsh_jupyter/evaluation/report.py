"""Tables and plots of evaluation records, for the notebook.

:func:`results_table` and :func:`summary_table` return a pandas ``DataFrame``
when pandas is installed, else a :class:`Table` that renders as HTML in a
notebook and as aligned text elsewhere. :func:`save_plot` (per task) and
:func:`save_matrix_plot` (success against tokens, one point per model x
presentation cell) need matplotlib, imported on first use, with no pyplot state:
figures are written to PNG files.
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .results import CellSummary, TaskRecord

RECORD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("task", "task"), ("model", "model"), ("mode", "mode"), ("repeat", "repeat"),
    ("success", "ok"), ("steps", "steps"), ("tool_calls", "tool calls"),
    ("sub_calls", "sub-calls"), ("tool_result_bytes", "result bytes"),
    ("request_bytes", "request bytes"), ("tokens", "tokens"), ("token_source", "tokens are"),
    ("wall_seconds", "wall s"))
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "model"), ("mode", "mode"), ("succeeded", "succeeded"), ("runs", "runs"),
    ("success_rate", "success"), ("ci_low", "95% CI low"), ("ci_high", "95% CI high"),
    ("pass_at_1", "pass@1"), ("k", "k"), ("pass_at_k", "pass@k"), ("steps", "steps"),
    ("tool_calls", "tool calls"), ("sub_calls", "sub-calls"),
    ("tool_result_bytes", "result bytes"), ("request_bytes", "request bytes"),
    ("tokens", "tokens"), ("token_source", "tokens are"),
    ("seconds_per_step", "s per step"), ("wall_seconds", "wall s"))
PLOTTED: tuple[tuple[str, str], ...] = (
    ("steps", "model requests (steps)"), ("tool_calls", "tool calls the model made"),
    ("tool_result_bytes", "tool output returned to the model (bytes)"),
    ("request_bytes", "request bodies sent, summed (bytes)"))


class Table:
    """Rows under headers: HTML in a notebook (every cell escaped), text elsewhere."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        self.headers = tuple(headers)
        self.rows = tuple(tuple(row) for row in rows)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row)
                       + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __str__(self) -> str:
        cells = [list(self.headers), *([_cell(v) for v in row] for row in self.rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.headers))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def results_table(records: Sequence[TaskRecord]) -> Any:
    """One row per task and mode."""
    return _table(RECORD_COLUMNS, [_fields(r, RECORD_COLUMNS) for r in records])


def summary_table(summary: Sequence[CellSummary]) -> Any:
    """One row per model x presentation cell (``evaluation.summary()``)."""
    return _table(SUMMARY_COLUMNS, [_fields(s, SUMMARY_COLUMNS) for s in summary])


def save_matrix_plot(summary: Sequence[CellSummary], path: str | Path, *,
                     title: str = "", dpi: int = 100) -> Path:
    """Success rate (with its 95 % Wilson interval as error bars) against tokens per
    run, one point per model x presentation cell; written to ``path`` as a PNG.
    Estimated token counts are drawn hollow, server-reported ones filled."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter
    except ImportError:
        raise ImportError("the evaluation plot needs matplotlib: "
                          "pip install 'dsh-jupyter[eval]'") from None
    models = list(dict.fromkeys(c.model for c in summary))
    modes = list(dict.fromkeys(c.mode for c in summary))
    markers = "osD^vP*X"
    colours = [f"C{i}" for i in range(10)]
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    ax = figure.subplots()
    for cell in summary:
        colour = colours[modes.index(cell.mode) % len(colours)]
        marker = markers[models.index(cell.model) % len(markers)]
        rate = cell.success_rate
        ax.errorbar([cell.tokens_per_run], [rate],
                    yerr=[[rate - cell.ci_low], [cell.ci_high - rate]], fmt=marker,
                    color=colour, markersize=8, capsize=4,
                    markerfacecolor=colour if cell.token_source == "server" else "white",
                    label=cell.cell if len(models) > 1 else cell.mode)
        ax.annotate(f"{cell.succeeded}/{cell.runs}", (cell.tokens_per_run, rate),
                    textcoords="offset points", xytext=(8, -4), fontsize=8)
    sources = {c.token_source for c in summary}
    kind = "server-reported" if sources == {"server"} else (
        "estimated" if sources == {"estimate"} else "server-reported (filled) or estimated")
    ax.set_xlabel(f"tokens per run ({kind})")
    ax.set_ylabel("success rate (95 % Wilson interval)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(min([0.5, *(c.ci_low - 0.05 for c in summary)]), 1.05)
    ax.grid(alpha=0.3)
    ax.margins(x=0.15)
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title, fontsize=10)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=dpi, format="png", metadata={"Software": None})
    return target


def save_plot(records: Sequence[TaskRecord], path: str | Path, *, dpi: int = 100) -> Path:
    """Grouped bars per task and mode (steps, tool calls, bytes returned, bytes sent;
    means over repeats, one group per cell with several models), written to
    ``path`` as a PNG."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise ImportError("the evaluation plot needs matplotlib: "
                          "pip install 'dsh-jupyter[eval]'") from None
    several = len({r.model for r in records}) > 1
    tasks = list(dict.fromkeys(r.task for r in records))
    modes = list(dict.fromkeys(f"{r.model}/{r.mode}" if several else r.mode for r in records))
    runs: dict[tuple[str, str], list[TaskRecord]] = {}
    for r in records:
        runs.setdefault((r.task, f"{r.model}/{r.mode}" if several else r.mode), []).append(r)
    figure = Figure(figsize=(11, 7), layout="constrained")
    axes = figure.subplots(2, 2, sharex=True)
    width = 0.8 / max(len(modes), 1)
    for ax, (name, title) in zip(axes.flat, PLOTTED, strict=True):
        for index, mode in enumerate(modes):
            values = [_mean(runs.get((t, mode), []), name) for t in tasks]
            ax.bar([i + (index - (len(modes) - 1) / 2) * width for i in range(len(tasks))],
                   values, width, label=mode)
        ax.set_title(title, fontsize=10)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", fontsize=8)
    axes.flat[0].legend()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=dpi, format="png")
    return target


def _mean(records: Sequence[TaskRecord], name: str) -> float:
    """The mean of one field over a task's repeats (0 when it did not run)."""
    return sum(float(getattr(r, name)) for r in records) / len(records) if records else 0.0


def _fields(item: object, columns: Sequence[tuple[str, str]]) -> list[object]:
    return [getattr(item, name) for name, _ in columns]


def _table(columns: Sequence[tuple[str, str]], rows: list[list[object]]) -> Any:
    headers = [label for _, label in columns]
    try:
        pandas = importlib.import_module("pandas")  # optional; never added just for this
    except ImportError:
        return Table(headers, rows)
    return pandas.DataFrame(rows, columns=headers)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
