"""The ``dsh-jupyter`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsh-jupyter", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the built-in demo against sample tools")
    options = parser.parse_args(argv)
    if options.command == "demo":
        from .demo.native import run_demo

        return asyncio.run(run_demo(sys.stdout))
    return 2  # unreachable: argparse rejects unknown commands


if __name__ == "__main__":
    raise SystemExit(main())
