"""PythonBundle's .pth search, answered once per installation (torchstack.install.pthsearch)."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path
from typing import Any

import pytest
from easybuild.easyblocks.generic import pythonbundle
from easybuild.tools import filetools

from torchstack.install import pthsearch
from torchstack.install.pthsearch import searched_once


@pytest.fixture(autouse=True)
def _no_index_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """EasyBuild's --ignore-index, unset as by default (no eb configuration here)."""
    monkeypatch.setattr(pthsearch, "build_option", lambda name: False)


def _counting(calls: list[tuple[Any, ...]]) -> Any:
    def fake(paths: list[str], query: str, *args: Any, **kwargs: Any) -> tuple[list[Any], Any]:
        calls.append((tuple(paths), query, kwargs))
        return [], [f"{paths[0]}/hit-{len(calls)}.pth"]
    return fake


def test_same_search_answered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(pythonbundle, "search_file", _counting(calls))
    searches: dict[Any, Any] = {}  # not silent: EasyBuild's own search (the fake) answers
    with searched_once(searches):
        first = pythonbundle.search_file(["/inst"], r".*\.pth", silent=False)
        again = pythonbundle.search_file(["/inst"], r".*\.pth", silent=False)
        other = pythonbundle.search_file(["/inst"], r".*\.egg-link", silent=False)
    assert first == again == ([], ["/inst/hit-1.pth"])
    assert other == ([], ["/inst/hit-2.pth"])
    assert len(calls) == 2
    with searched_once(searches):  # the answers outlive one module: the next reuses them
        assert pythonbundle.search_file(["/inst"], r".*\.pth", silent=False) == first
    assert len(calls) == 2


def test_answers_are_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pythonbundle, "search_file", _counting([]))
    with searched_once({}):
        _, hits = pythonbundle.search_file(["/inst"], r".*\.pth")
        hits.clear()  # a caller changing its list does not change the next answer
        assert pythonbundle.search_file(["/inst"], r".*\.pth")[1] == ["/inst/hit-1.pth"]


def test_restored_after_the_block_even_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _counting([])
    monkeypatch.setattr(pythonbundle, "search_file", fake)
    with pytest.raises(RuntimeError), searched_once({}):
        assert pythonbundle.search_file is not fake
        raise RuntimeError("make_module_extra failed")
    assert pythonbundle.search_file is fake


def test_byte_compiling_cannot_change_the_answer(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # EasyBuild's search matches file names; a .pyc's name holds '.pth' exactly when its
    # source's does, so files the byte-compile adds after the first search change nothing
    monkeypatch.setattr(filetools, "build_option", lambda name: False)  # no eb configuration here
    search_file = filetools.search_file
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "x.pth_tools.py").write_text("")
    (site / "extra.pth").write_text("import pkg\n")
    before = search_file([str(tmp_path)], r".*\.pth", silent=True)
    assert compileall.compile_dir(str(site), quiet=1)
    after = search_file([str(tmp_path)], r".*\.pth", silent=True)
    tag = sys.implementation.cache_tag
    assert sorted(Path(p).name for p in before[1]) == ["extra.pth", "x.pth_tools.py"]
    assert sorted(Path(p).name for p in after[1]) == [
        "extra.pth", f"x.pth_tools.{tag}.pyc", "x.pth_tools.py"]
    # PythonBundle asks only whether there is any: without one, none appears either
    for path in (site / "extra.pth", site / "pkg" / "x.pth_tools.py"):
        path.unlink()
    for pyc in site.rglob("*.pyc"):
        pyc.unlink()
    assert search_file([str(tmp_path)], r".*\.pth", silent=True) == ([], [])
    assert compileall.compile_dir(str(site), quiet=1)
    assert list(site.rglob("*.pyc"))
    assert search_file([str(tmp_path)], r".*\.pth", silent=True) == ([], [])


def test_an_easybuild_without_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pythonbundle, "search_file")
    with searched_once({}):
        assert not hasattr(pythonbundle, "search_file")
    assert not hasattr(pythonbundle, "search_file")


def _search_tree(root: Path) -> Path:
    """Names that match '.pth' in odd places: case, inside a name, behind links, in .git."""
    for folder in ["site/pkg2", "site/pkg10", "site/pkg1", "other/.git", "other/.svn",
                   "other/.local/lib", "linked-target/deep"]:
        (root / folder).mkdir(parents=True, exist_ok=True)
    for name in ["site/a.pth", "site/B.PTH", "site/pkg2/x.pth_tools.py", "site/pkg10/z.pth",
                 "site/pkg1/z.pth", "site/plain.py", "other/.git/hook.pth",
                 "other/.svn/entries.pth", "other/.local/lib/user.pth", "c++.pth",
                 "linked-target/deep/far.pth", "site/pthless.txt"]:
        (root / name).write_text("")
    (root / "site" / "via-link").symlink_to(root / "linked-target")  # followed, as EasyBuild does
    (root / "site" / "file-link.pth").symlink_to(root / "site" / "a.pth")
    (root / "site" / "dangling.pth").symlink_to(root / "nowhere")
    return root


@pytest.mark.parametrize("query", [r".*\.pth", r"\.pth$", r"c++\.pth", r"^pkg", r"PTH"])
def test_the_first_search_finds_what_easybuilds_finds(tmp_path: Path, query: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filetools, "build_option", lambda name: False)  # no eb configuration here
    root = _search_tree(tmp_path / "inst")
    paths = [str(root), str(root / "site"), str(tmp_path / "missing")]
    expected = filetools.search_file(paths, query, silent=True)
    assert pthsearch.matching_files(paths, query) == expected[1]
    monkeypatch.setattr(pythonbundle, "search_file", filetools.search_file)
    with searched_once({}):
        assert pythonbundle.search_file(paths, query, silent=True) == expected
    if query == r".*\.pth":  # the query PythonBundle asks: hits behind links, none in .git
        names = [Path(p).name for p in expected[1]]
        assert "far.pth" in names and "hook.pth" not in names and "user.pth" in names
        in_packages = [p.split("/site/")[-1] for p in expected[1] if "/site/pkg" in p]
        # natural order within each path (both paths reach the packages)
        assert in_packages == ["pkg1/z.pth", "pkg2/x.pth_tools.py", "pkg10/z.pth"] * 2
        assert "dangling.pth" in names and "x.pth_tools.py" in names


def test_other_searches_go_to_easybuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(pythonbundle, "search_file", _counting(calls))
    root = _search_tree(tmp_path / "inst")
    with searched_once({}):
        pythonbundle.search_file([str(root)], r".*\.pth", silent=True)  # PythonBundle's call
        assert calls == []
        pythonbundle.search_file([str(root)], r".*\.pth")  # not silent: EasyBuild prints
        pythonbundle.search_file([str(root)], r".*\.pth", silent=True, short=True)
        pythonbundle.search_file([str(root / "c++.pth")], r".*", silent=True)  # not a folder
        pythonbundle.search_file([str(root)], r"(", silent=True)  # EasyBuild's error
        (root / "other" / filetools.PATH_INDEX_FILENAME).write_text("")
        pythonbundle.search_file([str(root / "other")], r".*\.pth", silent=True)
    assert len(calls) == 5
