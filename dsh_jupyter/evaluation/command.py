"""``dsh-jupyter eval``: run the evaluation notebook through papermill.

::

    dsh-jupyter eval                                    # office tasks, 3 presentations, offline
    dsh-jupyter eval --tasks shop --presentations native code --repeats 3
    dsh-jupyter eval --tasks mypkg.evals:TASKS --models openai:gpt-4o-mini anthropic
    dsh-jupyter eval --only find-todos -p runtime in-process
    dsh-jupyter eval --param-file sets.yaml -o out      # one run per parameter set

``--tasks`` (a shipped set's name, a task file, or ``module:attribute``),
``--only``, ``--presentations`` (or ``--modes``), ``--models`` and ``--repeats``
set the notebook parameters of those names; ``-p NAME VALUE`` sets any
parameter (VALUE is parsed as JSON, else kept as text); ``--param-file`` holds
one parameter object or a list of them (JSON, or YAML for ``.yaml``/``.yml``); a
set's own values override the flags. One set writes into the output directory
itself; several write into a folder each, named by the set's ``label`` (else
``run-<n>``), plus ``runs.json`` listing them. Each folder holds the executed
``evaluation.ipynb``, ``results.jsonl``, ``summary.json``, ``matrix.png``,
``plot.png`` and ``sessions/`` (each run's events, for ``dsh-jupyter export``). The
exit status is 0 when every notebook ran (and, with ``--require-success``, every run
succeeded; with ``--min-success RATE``, every cell's success rate is at least RATE), 1
when one did not, and 2 for bad usage.
papermill is imported only when a run starts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from .._help import plain_help
from ..json_value import JsonValue, NotJsonError, snapshot_json
from .results import RESULTS_FILE, SUMMARY_FILE, read_summary
from .tasks import DEFAULT_TASK_SET, MODES, SHIPPED_SETS

NOTEBOOK_NAME = "evaluation.ipynb"
DEFAULT_OUTPUT = Path("evaluation-results")
RUNS_FILE = "runs.json"
SESSIONS_DIR = "sessions"  # where the notebook keeps each run's session log
_RESERVED = ("output_dir",)
KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=CRITICAL",)
"""Given to the notebook's kernel, whose log would land in the terminal among the results:
ipykernel 7 warns that a kernel on TCP (papermill's, on 127.0.0.1) is unencrypted, and
logs "KeyboardInterrupt caught in kernel" when the shutdown interrupts it. A cell's error
is in the executed notebook and in the FAILED line; a dead kernel is a FAILED line too."""


class Writer(Protocol):
    """Where a notebook's printed output is copied as it runs."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class UsageError(Exception):
    """Bad arguments or parameter files: reported with exit status 2."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotebookRun:
    """One execution of the notebook: where it wrote, and how it went."""

    label: str
    parameters: Mapping[str, JsonValue]
    directory: Path
    ok: bool
    error: str | None = None
    summary: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, JsonValue]:
        return {"label": self.label, "directory": str(self.directory),
                "notebook": str(self.directory / NOTEBOOK_NAME),
                "parameters": dict(self.parameters), "ok": self.ok, "error": self.error,
                "all_succeeded": None if self.summary is None
                else bool(self.summary.get("all_succeeded"))}


def default_notebook() -> Path:
    """The evaluation notebook shipped in the package (``notebooks/evaluation.ipynb`` of
    a checkout is a link to it), so an installed wheel runs it too."""
    return Path(__file__).resolve().parent / "data" / NOTEBOOK_NAME


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``eval``'s options to ``parser`` (its subcommand parser)."""
    parser.description = plain_help(__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--presentations", "--modes", nargs="+", choices=MODES,
                        metavar="MODE", dest="modes",
                        help=f"presentations to compare ({', '.join(MODES)}); "
                             "default: native code both")
    parser.add_argument("--tasks", "--task-set", dest="task_set", metavar="SPEC",
                        help="the task set: " + ", ".join(SHIPPED_SETS) + " (default "
                             f"{DEFAULT_TASK_SET}), a task file, or module:attribute")
    parser.add_argument("--only", nargs="+", metavar="TASK", help="run only these task ids")
    parser.add_argument("--models", nargs="+", metavar="MODEL",
                        help="models to compare: scripted (recorded), openai, openai:NAME, "
                             "anthropic, anthropic:NAME; default: scripted")
    parser.add_argument("--repeats", type=int, metavar="N",
                        help="runs per task in each cell (default 1)")
    parser.add_argument("-p", "--param", nargs=2, action="append", default=[],
                        metavar=("NAME", "VALUE"),
                        help="a notebook parameter; VALUE is JSON, else text (repeatable)")
    parser.add_argument("--param-file", type=Path, metavar="FILE",
                        help="JSON or YAML: a parameter set, or a list of them (one run each)")
    parser.add_argument("-o", "--output-dir", type=Path, default=DEFAULT_OUTPUT,
                        help=f"where notebooks and results go (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--notebook", type=Path, default=None,
                        help="the notebook to run (default: the one shipped in the package, "
                             "notebooks/evaluation.ipynb in a checkout)")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's)")
    parser.add_argument("--cell-timeout", type=float, default=None, metavar="SECONDS",
                        help="fail a notebook cell that runs longer than this")
    parser.add_argument("--progress-bar", action="store_true",
                        help="show papermill's per-cell progress bar too")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no per-task lines, only each run's summary")
    parser.add_argument("--require-success", action="store_true",
                        help="exit 1 unless every task of every run succeeded")
    parser.add_argument("--min-success", type=float, metavar="RATE",
                        help="exit 1 if any cell's success rate is below RATE (0-1)")


def run_command(options: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``dsh-jupyter eval`` with parsed ``options``; returns the exit status."""
    out = out or sys.stdout
    try:
        notebook = options.notebook or default_notebook()
        if not notebook.is_file():
            raise UsageError(f"notebook {notebook} not found; pass --notebook PATH")
        shared: dict[str, JsonValue] = {name: parse_value(value)
                                        for name, value in options.param}
        flags: dict[str, JsonValue] = {
            "modes": options.modes, "task_set": options.task_set, "tasks": options.only,
            "models": options.models, "repeats": options.repeats}
        shared.update({name: value for name, value in flags.items() if value is not None})
        if options.repeats is not None and options.repeats < 1:
            raise UsageError("--repeats must be at least 1")
        if options.min_success is not None and not 0 <= options.min_success <= 1:
            raise UsageError("--min-success is a rate between 0 and 1")
        sets = parameter_sets(shared, load_param_sets(options.param_file)
                              if options.param_file else None)
        papermill = _import_papermill()
        check_names(sets, set(papermill.inspect_notebook(str(notebook))))
        plan = plan_runs(sets, options.output_dir)
    except UsageError as error:
        print(f"dsh-jupyter eval: {error}", file=sys.stderr)
        return 2
    runs: list[NotebookRun] = []
    for label, parameters, directory in plan:
        tag = f"[{label}] " if len(plan) > 1 else ""
        print(f"{tag}running {notebook.name} -> {directory}", file=out, flush=True)
        run = run_notebook(papermill, notebook, parameters, directory, label=label,
                           kernel_name=options.kernel, cell_timeout=options.cell_timeout,
                           progress_bar=options.progress_bar,
                           stdout=None if options.quiet else _Prefixed(out, tag))
        runs.append(run)
        for line in describe(run):
            print(f"{tag}{line}", file=out, flush=True)
    if len(plan) > 1:
        index = options.output_dir / RUNS_FILE
        index.write_text(json.dumps([r.to_json() for r in runs], indent=2) + "\n",
                         encoding="utf-8")
        print(f"runs listed in {index}", file=out)
    failed = [r for r in runs if not r.ok]
    if options.require_success:
        failed += [r for r in runs if r.ok and not (r.summary or {}).get("all_succeeded")]
    if options.min_success is not None:
        for run in runs:
            low = [c for c in (run.summary or {}).get("cells", ())
                   if c["success_rate"] < options.min_success]
            for cell in low:
                print(f"{cell['model']}/{cell['mode']}: success rate "
                      f"{cell['success_rate']:.0%} is below --min-success "
                      f"{options.min_success:.0%}", file=out)
            if run.ok and low:
                failed.append(run)
    return 1 if failed else 0


def parse_value(text: str) -> JsonValue:
    """``-p`` values: JSON if they parse (``5``, ``null``, ``["code"]``), else the text."""
    try:
        value: JsonValue = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value


def load_param_sets(path: Path) -> list[dict[str, JsonValue]]:
    """A parameter file: one object, or a list of objects (JSON; YAML by suffix)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    data: object
    if path.suffix in (".yaml", ".yml"):
        yaml = importlib.import_module("yaml")  # papermill depends on PyYAML
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"{path} is not YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not JSON: {exc}") from None
    shape = f"{path}: expected a parameter object, or a non-empty list of them"
    sets: list[dict[str, JsonValue]] = []
    for each in data if isinstance(data, list) else [data]:
        try:
            value = snapshot_json(each, freeze=False)
        except NotJsonError as exc:
            raise UsageError(f"{path}: {exc}") from None
        if not isinstance(value, dict):
            raise UsageError(shape)
        sets.append(value)
    if not sets:
        raise UsageError(shape)
    return sets


def parameter_sets(shared: Mapping[str, JsonValue],
                   file_sets: Sequence[Mapping[str, JsonValue]] | None
                   ) -> list[dict[str, JsonValue]]:
    """One dict per run: ``shared`` overridden by each file set's own values."""
    return [{**shared, **each} for each in (file_sets or [{}])]


def check_names(sets: Sequence[Mapping[str, JsonValue]], known: set[str]) -> None:
    for parameters in sets:
        for name in parameters:
            if name in _RESERVED:
                raise UsageError(f"{name} is set by dsh-jupyter eval: use --output-dir")
            if name not in known:
                raise UsageError(f"the notebook has no parameter {name!r}; it has: "
                                 + ", ".join(sorted(known - set(_RESERVED))))


def plan_runs(sets: Sequence[Mapping[str, JsonValue]],
              output_dir: Path) -> list[tuple[str, dict[str, JsonValue], Path]]:
    """``(label, parameters, directory)`` per set; ``output_dir`` is made absolute so
    the notebook writes where asked whatever its working directory."""
    root = output_dir.resolve()
    plan: list[tuple[str, dict[str, JsonValue], Path]] = []
    for number, parameters in enumerate(sets, start=1):
        label = str(parameters.get("label") or ("" if len(sets) == 1 else f"run-{number}"))
        if len(sets) > 1 and (not label or "/" in label or label.startswith(".")):
            raise UsageError(f"label {label!r} cannot name a folder")
        directory = root / label if len(sets) > 1 else root
        if any(directory == other for _, _, other in plan):
            raise UsageError(f"two parameter sets are labelled {label!r}")
        plan.append((label, {**parameters, "output_dir": str(directory)}, directory))
    return plan


def run_notebook(papermill: Any, notebook: Path, parameters: Mapping[str, JsonValue],
                 directory: Path, *, label: str = "", kernel_name: str | None = None,
                 cell_timeout: float | None = None, progress_bar: bool = False,
                 stdout: Writer | None = None) -> NotebookRun:
    """Execute ``notebook`` with ``parameters`` into ``directory`` (created; results of
    an earlier run there are removed first, so they cannot pass for this run's)."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in (RESULTS_FILE, SUMMARY_FILE):
        (directory / stale).unlink(missing_ok=True)
    for log in (directory / SESSIONS_DIR).rglob("*.jsonl"):
        log.unlink()
    error: str | None = None
    try:
        papermill.execute_notebook(
            str(notebook), str(directory / NOTEBOOK_NAME), parameters=dict(parameters),
            kernel_name=kernel_name, progress_bar=progress_bar, stdout_file=stdout,
            stderr_file=None if stdout is None else sys.stderr,
            execution_timeout=cell_timeout, extra_arguments=list(KERNEL_ARGUMENTS),
            kernel_manager_class=_quiet_kernel_manager())
    except papermill.PapermillExecutionError as exc:
        error = f"cell {exc.exec_count} raised {exc.ename}: {exc.evalue}"
    except Exception as exc:  # a batch goes on: each failure is reported and fails the exit
        error = f"{type(exc).__name__}: {exc}"
    summary = None
    if (directory / SUMMARY_FILE).is_file():
        summary = read_summary(directory)
    elif error is None:
        error = f"the notebook wrote no {SUMMARY_FILE}"
    return NotebookRun(label=label, parameters=parameters, directory=directory,
                       ok=error is None, error=error, summary=summary)


def _quiet_kernel_manager() -> type:
    """A kernel manager whose kernel writes nothing to the terminal. Its log is off
    already (:data:`KERNEL_ARGUMENTS`), but libzmq, interrupted by the shutdown, sometimes
    aborts the exiting kernel with a line of its own ("Assertion failed: pfd.revents &
    POLLIN") on the stderr it inherited from us."""
    import subprocess

    from jupyter_client.manager import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kwargs: Any) -> None:  # type: ignore[override]
            kwargs["stderr"] = subprocess.DEVNULL
            await super().start_kernel(**kwargs)

    return QuietKernelManager


def describe(run: NotebookRun) -> list[str]:
    """What to print after a run: the failure, or one line per model x presentation."""
    if not run.ok:
        return [f"FAILED: {run.error}", f"see {run.directory / NOTEBOOK_NAME}"]
    assert run.summary is not None
    return [*map(cell_line, run.summary["cells"]), f"results in {run.directory}"]


def cell_line(s: Mapping[str, Any]) -> str:
    """One cell of ``summary.json`` as a line: correctness first, then cost."""
    tokens = "estimated" if s["token_source"] == "estimate" else s["token_source"]
    pass_k = f"pass@{s['k']} {s['pass_at_k']:.2f}, " if s["k"] > 1 else ""
    return (f"{s['model']}/{s['mode']}: {s['succeeded']}/{s['runs']} succeeded "
            f"({s['success_rate']:.0%}, 95% CI {s['ci_low']:.0%}-{s['ci_high']:.0%}), "
            f"pass@1 {s['pass_at_1']:.2f}, {pass_k}"
            f"{s['steps']} steps, {s['tool_calls']} tool calls, {s['sub_calls']} sub-calls, "
            f"{s['tool_result_bytes']:,} result bytes, {s['request_bytes']:,} request bytes, "
            f"{s['tokens']:,} tokens ({tokens}), {s['seconds_per_step']:.2f} s/step")


def _import_papermill() -> Any:
    try:
        return importlib.import_module("papermill")
    except ImportError:
        # run_command says "dsh-jupyter eval: " before it
        raise UsageError("papermill is not installed: pip install 'dsh-jupyter[eval]'") from None


class _Prefixed:
    """A text stream that starts every line with ``prefix`` (for several runs)."""

    def __init__(self, out: Writer, prefix: str) -> None:
        self._out = out
        self._prefix = prefix
        self._at_start = True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self._at_start:
                self._out.write(self._prefix)
            self._out.write(piece)
            self._at_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self._out.flush()
