"""``dsh-jupyter export``: a session log to a runnable notebook.

::

    dsh-jupyter export session.jsonl -o session.ipynb
    dsh-jupyter export session.jsonl -o session.ipynb --tools mypackage.tools:registry
    dsh-jupyter export session.jsonl -o shareable.ipynb --no-values
    dsh-jupyter export session.jsonl -o batch.ipynb --tools mypackage.tools:registry \
        --approvals replay

Exit status 0 when the notebook was written, 2 for a log that is not a session (empty,
not JSON Lines, no dsh-jupyter events) or bad arguments, with one line saying which.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from .._help import plain_help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``export``'s arguments to ``parser`` (its subcommand parser)."""
    parser.description = plain_help(__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("session", type=Path, help="a JSON Lines session log")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="NOTEBOOK",
                        help="the notebook to write (.ipynb)")
    parser.add_argument("--tools", default=None, metavar="MODULE:ATTR",
                        help="the registry the notebook re-runs its programs against (a "
                             "registry, a function returning one, or an async context "
                             "manager yielding one); default: a setup cell to fill in")
    parser.add_argument("--no-values", dest="values", action="store_false",
                        help="leave out tool arguments, results and recorded outputs "
                             "(the programs stay)")
    parser.add_argument("--approvals", choices=("ask", "replay", "deny"), default="ask",
                        help="who answers the approvals the programs ask for when the "
                             "notebook runs (its `approvals` parameter; papermill -p "
                             "approvals ... overrides it): ask the user with the approval "
                             "card (denied where nobody can click), replay the session's "
                             "answers, or deny them (default: ask)")


def run_command(options: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``dsh-jupyter export`` with parsed ``options``; returns the exit status."""
    from .export import export_notebook

    out = out or sys.stdout
    if options.output.suffix != ".ipynb":
        print(f"dsh-jupyter export: -o names a notebook (.ipynb), got {options.output}",
              file=sys.stderr)
        return 2
    try:
        notebook = export_notebook(options.session, options.output, tools=options.tools,
                                   values=options.values, approvals=options.approvals)
    except ValueError as error:
        print(f"dsh-jupyter export: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"dsh-jupyter export: cannot write {options.output}: {error.strerror}",
              file=sys.stderr)
        return 2
    programs = notebook.metadata["dsh_jupyter"]["programs"]
    print(f"wrote {options.output}: {len(notebook.cells)} cells, {programs} "
          f"program{'' if programs == 1 else 's'}", file=out)
    return 0
