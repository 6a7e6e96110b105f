"""Re-execute the tutorials in place, so their saved outputs are what nbval checks.

    python notebooks/regenerate.py                      # every tutorial
    python notebooks/regenerate.py 03-code-mode.ipynb   # some of them

Each notebook runs top to bottom in a fresh kernel whose working directory is
``notebooks/`` (as under nbval). Then the widget views and the widget state are
dropped: the saved cards keep their text fallbacks (text/plain, text/html,
text/markdown), which render on GitHub, in nbconvert and in a JupyterLab without
the kernel, and which nbval compares. Cell timings are not recorded, so an
unchanged tutorial regenerates without a diff.

Run it after changing a tutorial, or anything a tutorial prints. The evaluation
notebook is not a tutorial: papermill runs it (``dsh-jupyter eval``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NOT_TUTORIALS = {"evaluation.ipynb"}


def tutorials() -> list[Path]:
    """Every tutorial notebook, in reading order."""
    return sorted(p for p in HERE.glob("*.ipynb") if p.name not in NOT_TUTORIALS)


def strip_widgets(nb: nbformat.NotebookNode) -> None:
    """Drop widget views and state; keep every text fallback."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)


def regenerate(path: Path, *, timeout: int = 300) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(HERE)}},
                            record_timing=False, store_widget_state=False)
    client.execute()
    strip_widgets(nb)
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, path)


def main(names: list[str]) -> None:
    paths = [HERE / name for name in names] if names else tutorials()
    for path in paths:
        print(f"running {path.name}", flush=True)
        regenerate(path)


if __name__ == "__main__":
    main(sys.argv[1:])
