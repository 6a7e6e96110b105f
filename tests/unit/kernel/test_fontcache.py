"""matplotlib's font list: found as matplotlib finds it, seeded once, copied per workspace."""

from __future__ import annotations

import os
from pathlib import Path

from dsh_jupyter.kernel.run.fontcache import (
    CACHE_IN_HOME,
    MAX_FONT_LIST_BYTES,
    font_lists,
    matplotlib_cache_directory,
    seed_font_cache,
)
from dsh_jupyter.kernel.run.workspace import SEED_HOME, Workspace


def test_the_cache_directory_is_where_matplotlib_looks() -> None:
    assert matplotlib_cache_directory({"MPLCONFIGDIR": "/m", "XDG_CACHE_HOME": "/x"}) == \
        Path("/m")
    assert matplotlib_cache_directory({"XDG_CACHE_HOME": "/x"}) == Path("/x/matplotlib")
    assert matplotlib_cache_directory({"XDG_CACHE_HOME": "relative"}) == \
        Path.home() / ".cache" / "matplotlib"
    assert matplotlib_cache_directory({}) == Path.home() / ".cache" / "matplotlib"


def test_only_regular_font_lists_of_a_sane_size(tmp_path: Path) -> None:
    (tmp_path / "fontlist-v390.json").write_text("{}")
    (tmp_path / "other.json").write_text("{}")
    (tmp_path / "fontlist-v1.json").symlink_to("/etc/passwd")
    with open(tmp_path / "fontlist-v2.json", "wb") as big:
        big.truncate(MAX_FONT_LIST_BYTES + 1)
    assert font_lists(tmp_path) == [tmp_path / "fontlist-v390.json"]
    assert font_lists(tmp_path / "missing") == []


def test_seeded_once_then_copied_into_every_workspace(tmp_path: Path) -> None:
    source = tmp_path / "host-cache"
    source.mkdir()
    (source / "fontlist-v390.json").write_text('{"fonts": []}')
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir()
    copied = seed_font_cache(runtime_dir / SEED_HOME, build=False, source=source)
    assert copied == [runtime_dir / SEED_HOME / CACHE_IN_HOME / "fontlist-v390.json"]
    first = Workspace.create(runtime_dir)
    second = Workspace.create(runtime_dir)
    mine = Path(first.kernel.home) / CACHE_IN_HOME / "fontlist-v390.json"
    assert mine.read_text() == '{"fonts": []}'
    mine.write_text("a program's own changes")  # a copy: nothing reaches the others
    assert (Path(second.kernel.home) / CACHE_IN_HOME / "fontlist-v390.json").read_text() == \
        '{"fonts": []}'
    assert copied[0].read_text() == '{"fonts": []}'
    assert not os.path.samefile(mine, copied[0])


def test_nothing_to_seed_is_no_error(tmp_path: Path) -> None:
    assert seed_font_cache(tmp_path / SEED_HOME, build=False, source=tmp_path / "none") == []
    workspace = Workspace.create(tmp_path)
    assert sorted(p.name for p in Path(workspace.kernel.home).iterdir()) == [".ipython"]
