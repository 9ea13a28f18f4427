"""support/dedupe.py: the session's eb installs share their identical large files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.dedupe import Linker

BIG = b"x" * 64  # large for a Linker(min_size=32)


def _install(root: Path, files: dict[str, bytes], mode: int = 0o644) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    return root


def _never_read(path: Path) -> str:
    raise AssertionError(f"{path} was hashed")


def _same(a: Path, b: Path) -> bool:
    return os.stat(a).st_ino == os.stat(b).st_ino


class TestLink:
    def test_identical_file_becomes_a_link(self, tmp_path: Path) -> None:
        linker = Linker(min_size=32)
        first = _install(tmp_path / "a", {"lib/libtorch.so": BIG})
        second = _install(tmp_path / "b", {"lib/libtorch.so": BIG})
        assert linker.link(first) == 0
        assert linker.link(second) == len(BIG)
        assert _same(first / "lib/libtorch.so", second / "lib/libtorch.so")
        assert (second / "lib/libtorch.so").read_bytes() == BIG
        assert sorted(p.name for p in (second / "lib").iterdir()) == ["libtorch.so"]  # no staging

    @pytest.mark.parametrize(("name", "data", "mode"), [
        ("lib/small.so", b"x" * 31, 0o644),        # below min_size: not worth hashing
        ("torch/big.py", BIG, 0o644),              # .py: its byte-code records its mtime
        ("lib/libtorch.so", b"y" * 64, 0o644),     # same size, other content
        ("lib/libtorch.so", BIG, 0o755),           # same content, other mode
    ], ids=["small", "python-source", "other-content", "other-mode"])
    def test_left_alone(self, tmp_path: Path, name: str, data: bytes, mode: int) -> None:
        linker = Linker(min_size=32)
        linker.link(_install(tmp_path / "a", {name: BIG if len(data) == 64 else data}))
        assert linker.link(_install(tmp_path / "b", {name: data}, mode)) == 0
        assert not _same(tmp_path / "a" / name, tmp_path / "b" / name)

    def test_folder_linked_once(self, tmp_path: Path) -> None:
        linker = Linker(min_size=32)
        linker.link(_install(tmp_path / "a", {"x.so": BIG}))
        second = _install(tmp_path / "b", {"x.so": BIG})
        assert linker.link(second) == len(BIG)
        assert linker.link(second) == 0

    def test_changed_earlier_file_is_not_a_source(self, tmp_path: Path) -> None:
        # an earlier install rebuilt with other content since it was seen: never linked to
        linker = Linker(min_size=32)
        first = _install(tmp_path / "a", {"x.so": BIG})
        linker.link(first)
        (first / "x.so").unlink()
        (first / "x.so").write_bytes(BIG)  # same bytes, but a new file: not the one seen
        second = _install(tmp_path / "b", {"x.so": BIG})
        assert linker.link(second) == 0
        third = _install(tmp_path / "c", {"x.so": BIG})
        assert linker.link(third) == len(BIG)  # second took its place
        assert _same(second / "x.so", third / "x.so")

    def test_removed_earlier_install_is_forgotten(self, tmp_path: Path) -> None:
        linker = Linker(min_size=32)
        first = _install(tmp_path / "a", {"x.so": BIG})
        linker.link(first)
        (first / "x.so").unlink()
        assert linker.link(_install(tmp_path / "b", {"x.so": BIG})) == 0


class TestLinkInstalls:
    def test_every_install_of_a_software_tree(self, tmp_path: Path) -> None:
        linker = Linker(min_size=32)
        software = tmp_path / "software"
        log = "easybuild/easybuild-PyTorch-2.13.0-20261206.042320.log"
        for version in ("2.13.0-whl", "2.13.0-copy-whl", "2.13.0-pb"):
            _install(software / "PyTorch" / version, {"lib/libtorch.so": BIG, log: b""})
        assert linker.link_installs(software) == 2 * len(BIG)
        inodes = {os.stat(p).st_ino for p in software.glob("PyTorch/*/lib/libtorch.so")}
        assert len(inodes) == 1

    def test_failed_install_left_alone(self, tmp_path: Path) -> None:
        # eb copies its log into an install at the end: without one, eb did not finish it
        linker = Linker(min_size=32)
        software = tmp_path / "software"
        done = _install(software / "PyTorch" / "2.13.0-whl",
                        {"lib/libtorch.so": BIG, "easybuild/easybuild-PyTorch-x.log": b""})
        failed = _install(software / "PyTorch" / "2.13.0-broken-whl", {"lib/libtorch.so": BIG})
        assert linker.link_installs(software) == 0
        assert not _same(done / "lib/libtorch.so", failed / "lib/libtorch.so")

    def test_missing_tree(self, tmp_path: Path) -> None:
        assert Linker().link_installs(tmp_path / "software") == 0



class TestSitePackages:
    def test_small_file_linked(self, tmp_path: Path) -> None:
        linker = Linker()
        name = "lib/python3.11/site-packages/torch/include/c10.h"
        first = _install(tmp_path / "a", {name: b"#pragma once\n"})
        second = _install(tmp_path / "b", {name: b"#pragma once\n"})
        linker.link(first)
        assert linker.link(second) == len(b"#pragma once\n")
        assert _same(first / name, second / name)

    @pytest.mark.parametrize("name", ["pkg/mod.py", "pkg/__pycache__/mod.cpython-311.pyc"])
    def test_python_files_left_alone(self, tmp_path: Path, name: str) -> None:
        # each install's byte-code records its own source's mtime and path
        linker = Linker()
        site = "lib/python3.11/site-packages/"
        first = _install(tmp_path / "a", {site + name: BIG})
        second = _install(tmp_path / "b", {site + name: BIG})
        linker.link(first)
        assert linker.link(second) == 0
        assert not _same(first / site / name, second / site / name)


class TestKnownCache:
    """uv's cache of unpacked wheels counts as seen: what pip writes again links to it."""

    def test_install_links_to_the_cache_which_stays_untouched(self, tmp_path: Path) -> None:
        linker = Linker(min_size=32)
        cached = _install(tmp_path / "archive" / "abc", {"torch/lib/libtorch.so": BIG})
        before = os.stat(cached / "torch/lib/libtorch.so")
        linker.know(tmp_path / "archive")
        install = _install(tmp_path / "pip", {"lib/site-packages/torch/lib/libtorch.so": BIG})
        assert linker.link(install) == len(BIG)
        assert _same(cached / "torch/lib/libtorch.so",
                     install / "lib/site-packages/torch/lib/libtorch.so")
        after = os.stat(cached / "torch/lib/libtorch.so")
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

    def test_file_linked_from_the_cache_stays_as_it_is(self, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
        # uv keeps a copy of a wheel per path it was installed from: an install hard-linked
        # from the second copy is already shared, and nothing is read to link it to the first
        linker = Linker(min_size=32)
        first = _install(tmp_path / "archive" / "one", {"torch/lib/libtorch.so": BIG})
        second = _install(tmp_path / "archive" / "two", {"torch/lib/libtorch.so": BIG})
        linker.know(tmp_path / "archive")
        install = tmp_path / "uv" / "lib/site-packages/torch/lib/libtorch.so"
        install.parent.mkdir(parents=True)
        os.link(second / "torch/lib/libtorch.so", install)
        monkeypatch.setattr("support.wheelbuild._digest", _never_read)
        assert linker.link(tmp_path / "uv") == 0
        assert _same(install, second / "torch/lib/libtorch.so")
        assert not _same(install, first / "torch/lib/libtorch.so")

    def test_new_cache_folders_are_read_on_the_next_call(self, tmp_path: Path) -> None:
        linker = Linker(min_size=32)
        linker.know(tmp_path / "archive")  # not there yet: nothing known
        _install(tmp_path / "archive" / "one", {"a.so": BIG})
        linker.know(tmp_path / "archive")
        _install(tmp_path / "archive" / "two", {"b.so": BIG})
        linker.know(tmp_path / "archive")
        assert linker.link(_install(tmp_path / "pip", {"a.so": BIG, "b.so": BIG})) == 2 * len(BIG)
