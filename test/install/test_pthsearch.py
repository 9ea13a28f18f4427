"""PythonBundle's .pth search, answered once per installation (torchstack.install.pthsearch)."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path
from typing import Any

import pytest
from easybuild.easyblocks.generic import pythonbundle
from easybuild.tools import filetools

from torchstack.install.pthsearch import searched_once


def _counting(calls: list[tuple[Any, ...]]) -> Any:
    def fake(paths: list[str], query: str, *args: Any, **kwargs: Any) -> tuple[list[Any], Any]:
        calls.append((tuple(paths), query, kwargs))
        return [], [f"{paths[0]}/hit-{len(calls)}.pth"]
    return fake


def test_same_search_answered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(pythonbundle, "search_file", _counting(calls))
    searches: dict[Any, Any] = {}
    with searched_once(searches):
        first = pythonbundle.search_file(["/inst"], r".*\.pth", silent=True)
        again = pythonbundle.search_file(["/inst"], r".*\.pth", silent=True)
        other = pythonbundle.search_file(["/inst"], r".*\.egg-link", silent=True)
    assert first == again == ([], ["/inst/hit-1.pth"])
    assert other == ([], ["/inst/hit-2.pth"])
    assert len(calls) == 2
    with searched_once(searches):  # the answers outlive one module: the next reuses them
        assert pythonbundle.search_file(["/inst"], r".*\.pth", silent=True) == first
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
