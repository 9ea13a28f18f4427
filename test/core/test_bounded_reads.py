"""Every file torchstack reads, read through torchstack._files: regular files only, bounded.

Each case makes, where torchstack reads a file, a FIFO (whose open() waits for a writer for
ever), a link to /dev/zero (whose read never ends) or a regular file larger than the bound of
its kind (sparse, so it costs no disk), and runs the reader under `deadline`, which turns a
hang into a failure and caps the address space: a reader that takes a 2 GB file whole fails
with MemoryError. Wheels are zip bombs built here: a member of a 2 MB wheel that inflates to
512 MiB, declared as such or declared small.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.badinput import assert_one_error, deadline, run_cli

from torchstack import _files
from torchstack.distributions import DistributionError, tree_distributions
from torchstack.doctor import interpreter, jit, venvrecord
from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.stack import read_stack
from torchstack.doctor.venvcheck import venv_findings
from torchstack.generator import _ebconfig, stage2, toolchains
from torchstack.guards import moduleloads
from torchstack.index import _zipdir, wheelelf
from torchstack.index.consumers import ProjectListError, parse_projects
from torchstack.index.protocol import IndexAccessError, IndexFile
from torchstack.index.simple import SimpleIndex
from torchstack.install import bytecode

HUGE = 2 << 30  # a sparse file of 2 GiB: over every bound but the shared objects'
BOMB = 512 << 20  # what a bomb member inflates to: twice the memory `deadline` allows here
MEMORY = 256 << 20


def fifo(path: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def huge(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.truncate(HUGE)


SPECIAL: dict[str, tuple[Callable[[Path], None], str]] = {
    # what is made in place of the file, and what the one error line says
    "fifo": (fifo, "is a FIFO, not a regular file"),
    "dev-zero": (dev_zero, "is a character device, not a regular file"),
    "huge": (huge, "is larger than"),
}


def make(path: Path, kind: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    SPECIAL[kind][0](path)
    return path


class TestWithFile:
    # --with-file FIFO hung classify and generate; /dev/zero was read until memory ran out
    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_parse_projects(self, tmp_path: Path, kind: str) -> None:
        path = make(tmp_path / "projects.txt", kind)
        with deadline(20, MEMORY), pytest.raises(ProjectListError) as refused:
            parse_projects([], [path])
        assert str(path) in str(refused.value) and SPECIAL[kind][1] in str(refused.value)

    @pytest.mark.parametrize("kind", list(SPECIAL))
    @pytest.mark.parametrize("command", ["classify", "generate"])
    def test_cli(self, tmp_path: Path, kind: str, command: str) -> None:
        path = make(tmp_path / "projects.txt", kind)
        argv = {"classify": ["classify", "2.13.0", "--index", str(tmp_path / "no-index")],
                "generate": ["generate", "2.13.0", "--offline", "--out",
                             str(tmp_path / "out")]}[command]
        with deadline(60, MEMORY):
            code, _, err = run_cli([*argv, "--with-file", str(path)], seconds=30)
        assert_one_error(code, err, repr(str(path)), SPECIAL[kind][1])
        assert not (tmp_path / "out").exists()

    def test_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "projects.txt"
        path.write_bytes(b"torchaudio\nx\xffformers\n")
        with pytest.raises(ProjectListError, match=r"is not UTF-8 text \(byte 12 is 0xff\)"):
            parse_projects([], [path])


class TestCatalog:
    # a FIFO catalog file was "the catalog has no torch '2.0.0' (it has: 2.0.0)"
    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_generate_offline(self, tmp_path: Path, kind: str) -> None:
        path = make(tmp_path / "catalog" / "torch-2.0.0.json", kind)
        with deadline(60, MEMORY):
            code, _, err = run_cli(["generate", "2.0.0", "--offline", "--catalog",
                                    str(tmp_path / "catalog"), "--out", str(tmp_path / "out")])
        line = assert_one_error(code, err, str(path), SPECIAL[kind][1])
        assert "has no torch" not in line

    def test_catalog_list(self, tmp_path: Path) -> None:
        path = make(tmp_path / "catalog" / "torch-2.0.0.json", "fifo")
        code, _, err = run_cli(["catalog", "list", "--dir", str(tmp_path / "catalog")])
        assert_one_error(code, err, str(path), "is a FIFO")


def _venv(root: Path) -> Interpreter:
    root.mkdir(parents=True, exist_ok=True)
    return Interpreter(str(root / "bin" / "python"), (3, 11), str(root), sys.base_prefix, (),
                       None, ())


RECORD = {"schema": 1, "modules": ["PyTorch/2.13.0-whl"], "python": "/m/bin/python3",
          "torch": "2.13.0+cpu", "abi_tag": None, "constraints": "torchstack-constraints.txt",
          "pins": {"torch": "2.13.0+cpu"}}


class TestDoctorVenv:
    # a FIFO torchstack-venv.json or pip.conf hung doctor
    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_record(self, tmp_path: Path, kind: str) -> None:
        venv = _venv(tmp_path / "v")
        make(tmp_path / "v" / venvrecord.RECORD, kind)
        with deadline(20, MEMORY):
            found = venv_findings(read_stack([]), venv, {})
        assert [(f.code, SPECIAL[kind][1] in f.message) for f in found] == [
            ("venv-record-unreadable", True)]

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_pip_conf(self, tmp_path: Path, kind: str) -> None:
        venv = _venv(tmp_path / "v")
        (tmp_path / "v" / venvrecord.RECORD).write_text(json.dumps(RECORD))
        make(tmp_path / "v" / venvrecord.PIP_CONF, kind)
        with deadline(20, MEMORY):
            found = venv_findings(read_stack([]), venv, {"LOADEDMODULES": "PyTorch/2.13.0-whl"})
        unwired = [f for f in found if f.code == "venv-constraints-unwired"]
        assert len(unwired) == 1 and SPECIAL[kind][1] in unwired[0].message, found
        assert "pip.conf" in unwired[0].message

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_pyvenv_cfg(self, tmp_path: Path, kind: str) -> None:
        make(tmp_path / "pyvenv.cfg", kind)
        with deadline(20, MEMORY):
            assert interpreter.venv_config(tmp_path) == {}

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_cuda_version_files(self, tmp_path: Path, kind: str) -> None:
        # version.json that cannot be read leaves the answer to version.txt
        make(tmp_path / "version.json", kind)
        (tmp_path / "version.txt").write_text("CUDA Version 12.8.93\n")
        with deadline(20, MEMORY):
            assert jit.toolkit_version(str(tmp_path)) == "12.8"
        (tmp_path / "version.txt").unlink()
        make(tmp_path / "version.txt", kind)
        with deadline(20, MEMORY):
            assert jit.toolkit_version(str(tmp_path)) is None


# -- zip bombs --------------------------------------------------------------------------


def _bomb_wheel(path: Path, member: str, lie: bool = False) -> Path:
    """A torch wheel of about 2 MB whose `member` inflates to BOMB bytes of zeros; with `lie`
    its local header and central directory say it is 100 bytes."""
    zeros = bytes(16 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        if member != "torch-2.13.0.dist-info/METADATA":
            archive.writestr("torch-2.13.0.dist-info/METADATA",
                             "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
        if member != "torch/version.py":
            archive.writestr("torch/version.py", "__version__ = '2.13.0+cpu'\n")
        info = zipfile.ZipInfo(member)
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as stream:
            for _ in range(BOMB // len(zeros)):
                stream.write(zeros)
    if lie:
        _declare_small(path, member)
    assert path.stat().st_size < 4 << 20
    return path


def _declare_small(path: Path, member: str) -> None:
    """Rewrite the uncompressed size of `member` in the central directory, which is what
    zipfile believes, to 100 bytes."""
    data = bytearray(path.read_bytes())
    at = 0
    while (at := data.find(b"PK\x01\x02", at)) != -1:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_length] == member.encode():
            struct.pack_into("<L", data, at + 24, 100)
        at += 46
    path.write_bytes(bytes(data))


class TestWheelBombs:
    # a 2 MB wheel whose torch/version.py inflated to 2 GB was read whole: gigabytes of memory,
    # then a traceback (the figure: bench/README.rst)
    @pytest.mark.parametrize("member", ["torch/version.py", "torch-2.13.0.dist-info/METADATA"])
    def test_fingerprint_declared(self, tmp_path: Path, member: str) -> None:
        wheel = _bomb_wheel(tmp_path / "torch-2.13.0-cp311-cp311-linux_x86_64.whl", member)
        with deadline(60, MEMORY):
            code, _, err = run_cli(["fingerprint", str(wheel)], seconds=30)
        assert_one_error(code, err, repr(str(wheel)), member, f"is {BOMB} bytes, over the bound")

    def test_fingerprint_declared_small(self, tmp_path: Path) -> None:
        wheel = _bomb_wheel(tmp_path / "torch-2.13.0-cp311-cp311-linux_x86_64.whl",
                            "torch/version.py", lie=True)
        with zipfile.ZipFile(wheel) as archive:
            assert archive.getinfo("torch/version.py").file_size == 100  # the lie took
        with deadline(60, MEMORY):
            code, _, err = run_cli(["fingerprint", str(wheel)], seconds=30)
        assert_one_error(code, err, repr(str(wheel)), "torch/version.py")

    @pytest.mark.parametrize("lie", [False, True], ids=["declared", "declared-small"])
    def test_read_member_stops_at_the_bound(self, tmp_path: Path, lie: bool) -> None:
        wheel = _bomb_wheel(tmp_path / "bomb.whl", "big.so", lie)
        with zipfile.ZipFile(wheel) as archive, deadline(60, MEMORY):
            with pytest.raises(_files.FileKindError, match=r"'bomb': member 'big\.so'"):
                _files.read_member(archive, "big.so", 1 << 20, label="bomb")
            with open(tmp_path / "spool", "wb") as spool, pytest.raises(_files.FileKindError):
                _files.spool_member(archive, "big.so", spool, 1 << 20, label="bomb")
            assert (tmp_path / "spool").stat().st_size <= 1 << 20

    def test_spool_member_within_the_bound(self, tmp_path: Path) -> None:
        with zipfile.ZipFile(tmp_path / "w.whl", "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("a.so", b"\x7fELF" * 1000)
        with zipfile.ZipFile(tmp_path / "w.whl") as archive, open(tmp_path / "s", "wb") as out:
            _files.spool_member(archive, "a.so", out, 4000)
        assert (tmp_path / "s").read_bytes() == b"\x7fELF" * 1000


# -- the other readers ------------------------------------------------------------------


class TestOtherReaders:
    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_record_of_an_installed_distribution(self, tmp_path: Path, kind: str) -> None:
        meta = tmp_path / "demo-1.0.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text("Name: demo\nVersion: 1.0\n")
        make(meta / "RECORD", kind)
        (dist,) = tree_distributions(tmp_path)
        with deadline(20, MEMORY):
            if kind == "huge":
                with pytest.raises(DistributionError, match="RECORD' is larger than"):
                    dist.listing()
            else:  # a RECORD that is no file lists nothing, as a missing one
                assert dist.listing() == ()

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_metadata_of_an_installed_distribution(self, tmp_path: Path, kind: str) -> None:
        make(tmp_path / "demo-1.0.dist-info" / "METADATA", kind)
        with deadline(20, MEMORY):
            assert tree_distributions(tmp_path) == []  # skipped, as an unreadable one was

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_module_file(self, tmp_path: Path, kind: str) -> None:
        path = make(tmp_path / "PyTorch" / "2.13.0.lua", kind)
        with deadline(20, MEMORY), pytest.raises(_files.FileKindError, match=SPECIAL[kind][1]):
            moduleloads.module_dependencies(path)

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_stage2_easyconfig(self, tmp_path: Path, kind: str) -> None:
        path = make(tmp_path / "PyTorch-2.9.1-foss-2025a.eb", kind)
        with deadline(30, MEMORY), pytest.raises(stage2.Stage2Error, match=SPECIAL[kind][1]):
            stage2.derive(path)

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_robot_path_easyconfig(self, tmp_path: Path, kind: str) -> None:
        # EasyBuild's own read_file waited on a FIFO easyconfig in the robot path for ever
        path = make(tmp_path / "PyTorch-2.9.1-foss-2025a.eb", kind)
        with _ebconfig.session([str(tmp_path)]), deadline(60, MEMORY), \
                pytest.raises(_ebconfig.EasyBuildError, match=SPECIAL[kind][1]):
            _ebconfig.parse(str(path))

    def test_named_easyconfig(self, tmp_path: Path) -> None:
        path = make(tmp_path / "PyTorch-2.9.1-foss-2025a.eb", "huge")
        with deadline(60, MEMORY), pytest.raises(toolchains.ToolchainError,
                                                  match="is larger than"):
            toolchains.easyblock_of(path)

    @pytest.mark.parametrize("kind", list(SPECIAL))
    def test_python_source_scanned_for_imports(self, tmp_path: Path, kind: str) -> None:
        path = make(tmp_path / "pkg" / "__init__.py", kind)
        with deadline(20, MEMORY):
            assert list(bytecode.imports(str(path), "pkg")) == []

    @pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
    def test_local_wheel_range_reads(self, tmp_path: Path, kind: str) -> None:
        path = make(tmp_path / "demo-1.0-py3-none-any.whl", kind)
        with deadline(20, MEMORY):
            with pytest.raises(wheelelf.WheelElfError, match=SPECIAL[kind][1]):
                wheelelf.predict_file(path)
            with pytest.raises(_zipdir.ZipDirectoryError, match=SPECIAL[kind][1]):
                _zipdir.file_dist_info_metadata(path, "demo")


class TestLocalIndex:
    @pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
    def test_local_wheel_hashed(self, tmp_path: Path, kind: str) -> None:
        # a local wheel is hashed whole: a FIFO waited, /dev/zero never ended
        path = make(tmp_path / "demo-1.0-py3-none-any.whl", kind)
        file = IndexFile(project="demo", filename=path.name, url=path.as_uri(), sha256=None,
                         size=None, requires_python=None, yanked=False, core_metadata=False)
        with deadline(20, MEMORY), pytest.raises(IndexAccessError, match=SPECIAL[kind][1]):
            SimpleIndex(str(tmp_path)).download_sha256(file)

    def test_project_page(self, tmp_path: Path) -> None:
        make(tmp_path / "demo" / "index.html", "fifo")
        with deadline(20, MEMORY), pytest.raises(IndexAccessError, match="is a FIFO"):
            SimpleIndex(str(tmp_path)).files("demo")


class TestReadText:
    def test_replace(self, tmp_path: Path) -> None:
        (tmp_path / "f").write_bytes(b"a\xffb")
        assert _files.read_text(tmp_path / "f", 10, replace=True) == "a\ufffdb"

    def test_bound_is_inclusive(self, tmp_path: Path) -> None:
        (tmp_path / "f").write_text("12345")
        assert _files.read_text(tmp_path / "f", 5) == "12345"
        with pytest.raises(_files.FileKindError, match="is larger than 4 bytes"):
            _files.read_text(tmp_path / "f", 4)
