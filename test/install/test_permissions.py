"""EasyBuild's permissions step reading the installation once (torchstack.install.permissions):
the same modes as EasyBuild's own step, on copies of one tree with odd modes and links."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from easybuild.framework import easyblock
from easybuild.framework.easyblock import EasyBlock
from easybuild.tools import filetools
from easybuild.tools.build_log import EasyBuildError

from torchstack.install import ebversions, permissions
from torchstack.install.permissions import read_once

DEFAULTS = {"read_only_installdir": False, "group_writable_installdir": False, "umask": None,
            "max_fail_ratio_adjust_permissions": 0.5}


def _tree(root: Path) -> Path:
    """Files and folders with modes a permissions step changes, and links it must not."""
    for folder, mode in [("pkg", 0o777), ("pkg/sub", 0o700), ("pkg/sub/deep", 0o750),
                         ("private", 0o711), ("bin", 0o755)]:
        (root / folder).mkdir(parents=True)
        os.chmod(root / folder, mode)
    for name, mode in [("pkg/__init__.py", 0o666), ("pkg/sub/mod.py", 0o600),
                       ("pkg/sub/deep/lib.so", 0o775), ("private/secret", 0o400),
                       ("bin/tool", 0o700), ("top.txt", 0o640)]:
        (root / name).write_text(name)
        os.chmod(root / name, mode)
    (root / "pkg" / "link.py").symlink_to("__init__.py")
    (root / "pkg" / "sub-link").symlink_to("sub")
    (root / "bin" / "dangling").symlink_to("nowhere")
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "victim").write_text("")
    os.chmod(outside / "victim", 0o600)
    (root / "escape").symlink_to(outside / "victim")  # a link out of the installation
    return root


def _modes(root: Path) -> dict[str, int]:
    found = {".": os.lstat(root).st_mode}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = os.lstat(path).st_mode
    outside = root.parent / f"{root.name}-outside" / "victim"
    found["<outside>"] = os.lstat(outside).st_mode
    return found


@pytest.fixture(autouse=True)
def _made_on_this_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacement made on whatever EasyBuild release is installed: these tests decide
    whether a release goes into ebversions.PERMISSIONS (test_ebversions.py checks it is)."""
    here = ebversions.installed(ebversions.PERMISSIONS.package)
    monkeypatch.setattr(ebversions, "PERMISSIONS",
                        dataclasses.replace(ebversions.PERMISSIONS, tested=(here,)))


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of one tree: EasyBuild's own step on the first, read_once on the second."""
    return _tree(tmp_path / "eb"), _tree(tmp_path / "once")


@pytest.fixture
def options(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """EasyBuild's build options, as the permissions step and adjust_permissions read them."""
    chosen = dict(DEFAULTS)
    for module in (easyblock, filetools, permissions):
        monkeypatch.setattr(module, "build_option", lambda name: chosen[name])
    return chosen


def _permissions_step(installdir: Path, group: Any = None) -> None:
    """EasyBuild's real permissions step, on a stand-in for the easyblock it belongs to."""
    block = SimpleNamespace(installdir=str(installdir), group=group,
                            log=logging.getLogger("test-permissions"))
    EasyBlock.permissions_step(block)  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", [
    {},
    {"read_only_installdir": True},
    {"group_writable_installdir": True},
    {"umask": "027"},
    {"umask": "077", "group_writable_installdir": True},
])
def test_same_modes_as_easybuilds_step(trees: tuple[Path, Path], options: dict[str, Any],
                                       setting: dict[str, Any]) -> None:
    options.update(setting)
    ours, theirs = trees[1], trees[0]
    _permissions_step(theirs)
    with read_once():
        _permissions_step(ours)
    assert _modes(ours) == _modes(theirs)
    assert _modes(ours) != _modes(_tree(ours.parent / "fresh"))  # the step did change modes


def test_reads_each_path_once(trees: tuple[Path, Path], options: dict[str, Any],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    lstat = os.lstat

    def counting(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        seen.append(str(path))
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting)
    with read_once():
        _permissions_step(trees[1])
    assert seen and len(seen) == len(set(seen))  # three adjustments, one read of each path
    seen.clear()
    _permissions_step(trees[0])
    assert len(seen) > 2 * len(set(seen))  # EasyBuild's reads each several times


@pytest.mark.parametrize("bits,add,onlyfiles,onlydirs", [
    (stat.S_IWUSR, True, False, False),
    (stat.S_IRWXO, False, True, False),
    (stat.S_IXOTH | stat.S_IROTH, True, False, True),
])
def test_same_modes_for_single_calls(trees: tuple[Path, Path], options: dict[str, Any],
                                     bits: int, add: bool, onlyfiles: bool,
                                     onlydirs: bool) -> None:
    kwargs = {"add": add, "onlyfiles": onlyfiles, "onlydirs": onlydirs, "recursive": True,
              "relative": True, "ignore_errors": True}
    filetools.adjust_permissions(str(trees[0]), bits, **kwargs)
    with read_once():
        easyblock.adjust_permissions(str(trees[1]), bits, **kwargs)
    assert _modes(trees[1]) == _modes(trees[0])


def test_calls_it_does_not_cover_go_to_easybuild(trees: tuple[Path, Path],
                                                 options: dict[str, Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    original = easyblock.adjust_permissions

    @functools.wraps(original)  # with EasyBuild's signature
    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(easyblock, "adjust_permissions", spy)
    top = str(trees[1])
    with read_once():
        easyblock.adjust_permissions(top, stat.S_IWOTH, add=False)  # covered: read once
        assert calls == []
        easyblock.adjust_permissions(top, 0o755, relative=False)  # hard set: EasyBuild's
        easyblock.adjust_permissions(top, stat.S_IWOTH, recursive=False)
        easyblock.adjust_permissions(top, stat.S_IWOTH, group_id=4321)
        with pytest.raises(TypeError):
            easyblock.adjust_permissions(top, stat.S_IWOTH, follow=True)
    assert [c.get("relative", c.get("recursive")) for c in calls[:2]] == [False, False]
    assert calls[2]["group_id"] == 4321 and calls[3] == {"follow": True}
    assert easyblock.adjust_permissions is spy


def test_forgets_what_easybuilds_own_changed(trees: tuple[Path, Path],
                                             options: dict[str, Any]) -> None:
    # a hard set by EasyBuild's own function in between: the next call must read modes anew
    sequence = [((stat.S_IWOTH,), {"add": True}), ((0o700,), {"relative": False}),
                ((stat.S_IROTH,), {"add": True})]
    for args, kwargs in sequence:
        filetools.adjust_permissions(str(trees[0]), *args, **kwargs)
    with read_once():
        for args, kwargs in sequence:
            easyblock.adjust_permissions(str(trees[1]), *args, **kwargs)
    assert _modes(trees[1]) == _modes(trees[0])


def _failing_chmod(monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    chmod = os.chmod

    def chmod_or_fail(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        if failing in str(path):
            raise PermissionError(1, "Operation not permitted", str(path))
        chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod_or_fail)


@pytest.mark.parametrize("failing,ignore_errors,message", [
    ("pkg/sub/mod.py", True, None),  # one path of many: ignored as EasyBuild ignores it
    ("", True, r"of permissions/owner operations failed \(more than 50\.00%\)"),
    ("mod.py", False, r"Failed to chmod/chown several paths: .*pkg/sub/mod\.py"),
])
def test_failures_as_easybuild_reports_them(trees: tuple[Path, Path], options: dict[str, Any],
                                            monkeypatch: pytest.MonkeyPatch, failing: str,
                                            ignore_errors: bool, message: str | None) -> None:
    _failing_chmod(monkeypatch, failing)
    kwargs = {"add": True, "ignore_errors": ignore_errors}
    outcomes = []
    for call, top in [(filetools.adjust_permissions, trees[0]), (None, trees[1])]:
        try:
            if call is None:
                with read_once():
                    easyblock.adjust_permissions(str(top), stat.S_IWOTH, **kwargs)
            else:
                call(str(top), stat.S_IWOTH, **kwargs)
        except EasyBuildError as err:
            outcomes.append(str(err.msg).replace(str(top), "TOP"))
        else:
            outcomes.append(None)
    if message is None:
        assert outcomes == [None, None]
        assert _modes(trees[1]) == _modes(trees[0])
    else:
        assert all(o is not None and re.search(message, o) for o in outcomes), outcomes
        if not ignore_errors:
            assert outcomes[0] == outcomes[1]


def test_restored_after_the_block_even_on_error() -> None:
    original = easyblock.adjust_permissions
    with pytest.raises(RuntimeError), read_once():
        assert easyblock.adjust_permissions is not original
        raise RuntimeError("permissions step failed")
    assert easyblock.adjust_permissions is original


def test_an_easybuild_without_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(easyblock, "adjust_permissions")
    with read_once():
        assert not hasattr(easyblock, "adjust_permissions")
    assert not hasattr(easyblock, "adjust_permissions")


def test_a_folder_is_listed_before_any_change(trees: tuple[Path, Path],
                                             options: dict[str, Any]) -> None:
    # as EasyBuild's: every path is collected first, so taking search permission off the
    # folders still changes the files inside them (for a user other than root, who could
    # walk them regardless)
    bits = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
    filetools.adjust_permissions(str(trees[0]), bits, add=False)
    with read_once():
        easyblock.adjust_permissions(str(trees[1]), bits, add=False)
    assert _modes(trees[1]) == _modes(trees[0])
    assert not _modes(trees[1])[os.path.join("pkg", "sub", "deep", "lib.so")] & bits
