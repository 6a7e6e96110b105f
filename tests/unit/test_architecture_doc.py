"""docs/architecture.md names real places: every path it quotes exists, every class and
function its reading lists name is defined in the file named beside it, and every
package of dsh_jupyter has a row in its table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
QUOTED = re.compile(r"`([^`\s]+)`")


def quoted_paths(text: str) -> list[str]:
    """Quoted words that are paths: they hold a slash and end in a file or a folder."""
    found = []
    for word in QUOTED.findall(text):
        word = word.rstrip(":,.")
        if "/" in word and (word.endswith("/") or re.search(r"\.\w+$", word)):
            found.append(word)
    return found


def resolve(path: str) -> Path:
    """A path as the page writes it: from the repository root, or inside the package
    (``registry/pipeline.py``), or inside the kernel (``run/watch.py``)."""
    for base in (ROOT, ROOT / "dsh_jupyter", ROOT / "dsh_jupyter" / "kernel"):
        if (base / path).exists():
            return base / path
    raise AssertionError(f"docs/architecture.md names {path!r}, which does not exist")


def test_every_quoted_path_exists() -> None:
    paths = quoted_paths(PAGE.read_text(encoding="utf-8"))
    assert len(paths) > 40  # the page is read, not skipped
    for path in paths:
        resolve(path)


def test_a_missing_path_is_found() -> None:
    assert quoted_paths("see `registry/nowhere.py` and `tests/unit/`") == [
        "registry/nowhere.py", "tests/unit/"]
    try:
        resolve("registry/nowhere.py")
    except AssertionError as error:
        assert "nowhere.py" in str(error)
    else:
        raise AssertionError("a missing path passed")


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)}


def test_names_in_the_reading_lists_live_in_the_file_beside_them() -> None:
    # "`path`: `Name` ..." or "`path` (`Name`)": each such name is defined in that file.
    text = PAGE.read_text(encoding="utf-8")
    pairs = re.findall(r"`([\w/]+\.py)`(?::| \() *`(\w+)`", text)
    assert len(pairs) >= 5
    for path, name in pairs:
        assert name in defined_names(resolve(path)), (path, name)


def test_every_package_has_a_row() -> None:
    text = PAGE.read_text(encoding="utf-8")
    packages = sorted(p.parent.relative_to(ROOT).as_posix()
                      for p in (ROOT / "dsh_jupyter").glob("*/__init__.py")
                      if p.parent.name not in {"demo"})
    kernel = sorted(p.parent.relative_to(ROOT).as_posix()
                    for p in (ROOT / "dsh_jupyter" / "kernel").glob("*/__init__.py"))
    missing = [p for p in packages + kernel if f"`{p}/`" not in text]
    assert missing == []
