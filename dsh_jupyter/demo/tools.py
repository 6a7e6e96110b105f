"""Built-in sample tools for the demo, the tutorials and tests: an in-memory
file system, so nothing touches the real disk."""

from __future__ import annotations

import fnmatch

from ..registry import ToolRegistry
from ..registry.presentation import ReadLine, ReadResultView, SearchResultView

SAMPLE_FILES: dict[str, str] = {
    "README.md": "# Sample project\nA tiny project for the dsh-jupyter demo.\n",
    "src/app.py": "def main():\n    print('hello')\n\n\nif __name__ == '__main__':\n    main()\n",
    "src/util.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    "tests/test_util.py": (
        "from src.util import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    ),
}


def sample_registry(files: dict[str, str] | None = None) -> ToolRegistry:
    """A registry with ``list_files``, ``read_file`` and ``word_count`` over ``files``."""
    store = dict(SAMPLE_FILES if files is None else files)
    registry = ToolRegistry()

    def present_read(args: object, durable: object) -> ReadResultView | None:
        if not isinstance(args, dict) or getattr(durable, "is_error", True):
            return None
        path = str(args.get("path", ""))
        text = store.get(path, "")
        lines = tuple(ReadLine(number=i, text=t) for i, t in enumerate(text.splitlines(), 1))
        return ReadResultView(path=path, offset=1, lines=lines, total_lines=len(lines),
                              lang="python" if path.endswith(".py") else None)

    def present_list(args: object, durable: object) -> SearchResultView | None:
        if not isinstance(args, dict) or getattr(durable, "is_error", True):
            return None
        paths = tuple(p for p in sorted(store)
                      if fnmatch.fnmatch(p, str(args.get("pattern", "*"))))
        return SearchResultView(shape="paths", truncated=False, total=len(paths), paths=paths)

    @registry.tool(is_concurrency_safe=lambda args: True, present_result=present_list)
    async def list_files(pattern: str = "*") -> list[str]:
        """List files whose path matches a glob pattern."""
        return [p for p in sorted(store) if fnmatch.fnmatch(p, pattern)]

    @registry.tool(is_concurrency_safe=lambda args: True, present_result=present_read)
    async def read_file(path: str) -> str:
        """Read a text file."""
        if path not in store:
            from ..errors import ToolError

            raise ToolError(f"no such file: {path}", code="NOT_FOUND")
        return store[path]

    @registry.tool(is_concurrency_safe=lambda args: True)
    async def word_count(text: str) -> int:
        """Count the words in a text."""
        return len(text.split())

    return registry
