"""FIFOs, devices, symlink loops, dangling symlinks and folders where torchstack reads a file.

Opening a FIFO for reading waits for a writer and /dev/zero never ends, so each case runs
under a deadline. A special file must be named for what it is ("is a FIFO", "is a symlink
loop"), never reported as missing and never taken as absent: a libc10.so that is a FIFO is an
error (exit 2), not "C++ ABI unknown" with exit 0. The loader's tree walk skips them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support.badinput import assert_one_error, deadline, run_cli
from support.synthetic import PYTHON_SITE, SyntheticWheels, install_prefix

from torchstack.elf import loader
from torchstack.fingerprint.read import FingerprintError
from torchstack.guards.record import FINGERPRINT_FILE, read_fingerprint

pytest_plugins = ["support.synthetic"]


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def make_loop(path: Path) -> None:
    path.symlink_to(path.name)


def make_dangling(path: Path) -> None:
    path.symlink_to(path.name + ".gone")


def make_folder(path: Path) -> None:
    path.mkdir()


KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    # what is made in place of the file, and what the error says it is
    "fifo": (make_fifo, "is a FIFO"),
    "dev-zero": (make_device, "is a character device"),
    "symlink-loop": (make_loop, "is a symlink loop"),
    "dangling-symlink": (make_dangling, "is a dangling symlink"),
    "folder": (make_folder, "Is a directory"),
}


def replace_with(path: Path, kind: str) -> Path:
    if path.exists() or path.is_symlink():
        path.unlink()
    KINDS[kind][0](path)
    return path


class TestCommandLinePath:
    @pytest.mark.parametrize("name", ["thing", "torch-2.13.0-cp311-cp311-linux_x86_64.whl"])
    @pytest.mark.parametrize("kind", [k for k in KINDS if k != "folder"])
    def test_fingerprint(self, tmp_path: Path, kind: str, name: str) -> None:
        path = replace_with(tmp_path / name, kind)
        code, _, err = run_cli(["fingerprint", str(path)])
        line = assert_one_error(code, err, repr(str(path)), KINDS[kind][1])
        assert "does not exist" not in line

    def test_fingerprint_dev_zero_itself(self) -> None:
        code, _, err = run_cli(["fingerprint", "/dev/zero"])
        assert_one_error(code, err, "'/dev/zero' is a character device, not a file or folder")

    @pytest.mark.parametrize("kind", [k for k in KINDS if k != "folder"])
    @pytest.mark.parametrize("slot", ["provider", "consumer"])
    def test_check_json(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path, kind: str, slot: str
    ) -> None:
        path = replace_with(tmp_path / "fingerprint.json", kind)
        good = str(synthetic_wheels["torch-cpu-cxx11" if slot == "consumer" else "vision-cxx11"])
        argv = ["check", str(path), good] if slot == "provider" else ["check", good, str(path)]
        code, _, err = run_cli(argv)
        assert_one_error(code, err, repr(str(path)), KINDS[kind][1])


# (wheel, path of the file below the prefix's site-packages)
INSIDE = {
    "libc10": ("torch-cpu-cxx11", "torch/lib/libc10.so"),
    "libc10-cuda": ("torch-cu130", "torch/lib/libc10_cuda.so"),
    "torch-version-py": ("torch-cpu-cxx11", "torch/version.py"),
    "consumer-extension": ("vision-cxx11", "fakevision/_C.so"),
}


class TestInsideAnInstallation:
    @pytest.mark.parametrize("kind", list(KINDS))
    @pytest.mark.parametrize("inside", list(INSIDE))
    def test_fingerprint_and_check(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path, inside: str, kind: str
    ) -> None:
        wheel, member = INSIDE[inside]
        prefix = install_prefix(synthetic_wheels[wheel], tmp_path / "prefix")
        replace_with(prefix / PYTHON_SITE / member, kind)
        code, _, err = run_cli(["fingerprint", str(prefix)])
        assert_one_error(code, err, member, KINDS[kind][1])
        other = str(synthetic_wheels["torch-cpu-cxx11" if wheel.startswith("vision") else
                                     "vision-cxx11"])
        argv = ["check", other, str(prefix)] if wheel.startswith("vision") else [
            "check", str(prefix), other]
        code, _, err = run_cli(argv)
        assert_one_error(code, err, member, KINDS[kind][1])

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_recorded_fingerprint(self, tmp_path: Path, kind: str) -> None:
        # the easyblocks, hooks and scan read it: a FIFO is refused, not taken as "none"
        path = tmp_path / FINGERPRINT_FILE
        path.parent.mkdir()
        replace_with(path, kind)
        with deadline(20), pytest.raises(FingerprintError) as refused:
            read_fingerprint(tmp_path)
        assert str(path) in str(refused.value) and KINDS[kind][1] in str(refused.value)


class TestLoaderSkips:
    @pytest.mark.parametrize("kind", list(KINDS))
    def test_tree_walk(self, tmp_path: Path, kind: str) -> None:
        # ELF files named like shared objects: a special file so named is none, skipped
        replace_with(tmp_path / "libspecial.so", kind)
        with deadline(20):
            assert list(loader.iter_shared_objects(tmp_path)) == []
            assert loader.sonames_under(tmp_path) == {}

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_ld_so_conf_include(self, tmp_path: Path, kind: str) -> None:
        # ldconfig only warns about a file it cannot read; nothing must wait on one
        (tmp_path / "etc/ld.so.conf.d").mkdir(parents=True)
        (tmp_path / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n/opt/a\n")
        replace_with(tmp_path / "etc/ld.so.conf.d/special.conf", kind)
        with deadline(20):
            found = loader.read_ld_so_conf(str(tmp_path / "etc/ld.so.conf"), str(tmp_path))
        assert found == [str(tmp_path / "opt/a")]
