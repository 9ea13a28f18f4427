"""torchstack.guards.record: an installation's fingerprint file and its whatis line."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fingerprints import CPU, CU13, ROCM, consumer

from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint
from torchstack.guards import moduletree
from torchstack.guards.record import (
    FINGERPRINT_FILE,
    fingerprint_of,
    read_fingerprint,
    whatis_line,
    write_fingerprint,
)
from torchstack.output import OutputError, staged_name

FINGERPRINTS = [
    # a CPU torch
    CPU,
    # a CUDA torch: cuda and cuda_major set
    CU13,
    # a ROCm torch
    ROCM,
    # a C++ consumer with its torch libraries
    consumer("cxx", libraries=("libc10.so", "libtorch_cpu.so", "libtorch_cuda.so")),
    # a stable-ABI consumer with CUDA code of its own
    consumer("stable", cuda_major=13, libraries=()),
    # a pure-Python consumer: no torch release, no requirement
    consumer("python", requires=None, release=None, cxx11_abi=None, libraries=()),
]
FINGERPRINT_IDS = ["cpu", "cu13", "rocm", "cxx-consumer", "stable-consumer", "python-consumer"]


class TestWriteFingerprint:
    def test_writes_the_file_under_easybuild(self, tmp_path: Path) -> None:
        target = write_fingerprint(tmp_path, CPU)
        assert target == tmp_path / "easybuild" / "torchstack-fingerprint.json"
        assert target == tmp_path / FINGERPRINT_FILE
        assert json.loads(target.read_text()) == CPU.to_json()
        assert target.read_text().endswith("}\n")

    def test_accepts_a_str_installdir(self, tmp_path: Path) -> None:
        assert write_fingerprint(str(tmp_path), CPU) == tmp_path / FINGERPRINT_FILE

    def test_readable_by_everyone(self, tmp_path: Path) -> None:
        # mkstemp creates 0600; the module's users must read it
        target = write_fingerprint(tmp_path, CPU)
        assert stat.S_IMODE(target.stat().st_mode) == 0o644

    def test_leaves_no_temporary_file(self, tmp_path: Path) -> None:
        write_fingerprint(tmp_path, CPU)
        write_fingerprint(tmp_path, CU13)
        assert os.listdir(tmp_path / "easybuild") == ["torchstack-fingerprint.json"]

    def test_replaces_an_earlier_fingerprint(self, tmp_path: Path) -> None:
        write_fingerprint(tmp_path, CPU)
        write_fingerprint(tmp_path, CU13)
        assert read_fingerprint(tmp_path) == CU13

    def test_failed_replace_removes_the_temporary_file(self, tmp_path: Path) -> None:
        # a non-empty folder where the file should go: os.replace cannot replace it
        blocker = tmp_path / FINGERPRINT_FILE
        blocker.mkdir(parents=True)
        (blocker / "keep").write_text("")
        # output.replace_file, torchstack's one atomic write: its error names the file
        with pytest.raises(OutputError, match=r"cannot write '.*torchstack-fingerprint\.json'"):
            write_fingerprint(tmp_path, CPU)
        assert os.listdir(tmp_path / "easybuild") == ["torchstack-fingerprint.json"]
        assert os.listdir(blocker) == ["keep"]

    def test_an_existing_file_keeps_its_mode(self, tmp_path: Path) -> None:
        # as every atomic write of torchstack: a site's chmod of the recorded file stays
        target = write_fingerprint(tmp_path, CPU)
        target.chmod(0o640)
        write_fingerprint(tmp_path, CU13)
        assert stat.S_IMODE(target.stat().st_mode) == 0o640
        assert read_fingerprint(tmp_path) == CU13

    def test_staging_file_is_one_module_trees_skip(self, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        # a write killed before its rename leaves `.<name>.tmp-<8 hex>`, which moduletree and
        # rollout know as torchstack's staging files
        staged: list[str] = []
        rename = os.replace

        def watch(src: str | Path, dst: str | Path) -> None:
            staged.append(os.path.basename(src))
            rename(src, dst)

        monkeypatch.setattr(os, "replace", watch)
        write_fingerprint(tmp_path, CPU)
        assert len(staged) == 1
        assert moduletree.is_leftover(staged[0])
        assert staged_name(staged[0]) == "torchstack-fingerprint.json"


class TestReadFingerprint:
    @pytest.mark.parametrize("fingerprint", FINGERPRINTS, ids=FINGERPRINT_IDS)
    def test_round_trip(self, tmp_path: Path, fingerprint: Fingerprint) -> None:
        write_fingerprint(tmp_path, fingerprint)
        back = read_fingerprint(tmp_path)
        assert back == fingerprint
        assert read_fingerprint(str(tmp_path)) == fingerprint
        # a consumer's guard clauses are recorded with it, as compat derives them
        assert back is not None
        if fingerprint.role == "consumer":
            assert back.guard_clauses == compat.guard_clauses(fingerprint)
        else:
            assert back.guard_clauses is None

    @pytest.mark.parametrize(
        "layout",
        [
            # an installation without the easybuild folder
            "empty",
            # the easybuild folder without the fingerprint (installed before torchstack)
            "easybuild-only",
            # an installdir that does not exist
            "missing",
        ],
        ids=["empty", "easybuild-only", "missing"],
    )
    def test_none_when_absent(self, tmp_path: Path, layout: str) -> None:
        if layout == "easybuild-only":
            (tmp_path / "easybuild").mkdir()
        installdir = tmp_path / "nowhere" if layout == "missing" else tmp_path
        assert read_fingerprint(installdir) is None


PYTHON = consumer("python", requires=None, release=None, cxx11_abi=None, libraries=())
STABLE = consumer("stable", libraries=())
CXX = consumer("cxx")


Files = Callable[[Path], tuple[Fingerprint | None, list[Fingerprint]]]


def files(provider: Fingerprint | None, *consumers: Fingerprint) -> Files:
    """An installation's files as `fingerprint_of` reads them, without a wheel installed."""
    return lambda root: (provider, list(consumers))


class TestFingerprintOf:
    @pytest.mark.parametrize(
        ("recorded", "read", "provider_only", "expected"),
        [
            # the recorded fingerprint comes first, whatever the files hold
            (CXX, files(CPU), False, (CXX, "recorded")),
            # nothing recorded: the installation's torch
            (None, files(CPU, CXX), False, (CPU, "scanned")),
            # no torch: the most tightly linked consumer, the first of equals
            (None, files(None, PYTHON, CXX, STABLE, consumer("cxx", name="b")), False,
             (CXX, "scanned")),
            # nothing torch-related
            (None, files(None), False, (None, None)),
            # a torch only: a recorded consumer does not count, the files' torch does
            (CXX, files(CU13, STABLE), True, (CU13, "scanned")),
            # a torch only: consumers do not count
            (None, files(None, CXX), True, (None, None)),
            # a torch only: the recorded torch
            (CPU, files(CU13), True, (CPU, "recorded")),
        ],
        ids=["recorded", "torch", "strongest", "none", "provider-only", "provider-only-none",
             "provider-only-recorded"],
    )
    def test_decision(self, tmp_path: Path, recorded: Fingerprint | None, read: Files,
                      provider_only: bool, expected: tuple[object, object]) -> None:
        if recorded is not None:
            write_fingerprint(tmp_path, recorded)
        assert fingerprint_of(tmp_path, provider_only=provider_only, read_files=read) == expected

    def test_record_reader(self, tmp_path: Path) -> None:
        # a caller's reader decides what the record is; the files are not read then
        def unreadable(root: Path) -> tuple[Fingerprint | None, list[Fingerprint]]:
            raise AssertionError(f"{root} read")

        found = fingerprint_of(tmp_path, read_record=lambda root: STABLE, read_files=unreadable)
        assert found == (STABLE, "recorded")


class TestWhatisLine:
    @pytest.mark.parametrize(
        ("fingerprint", "expected"),
        [
            # the provider names its own ABI tag
            (CPU, "torchstack: provider torch-2.13.0-cxx11-cpu"),
            (CU13, "torchstack: provider torch-2.13.0-cxx11-cu13"),
            # a C++ consumer names the libtorch it needs
            (consumer("cxx"), "torchstack: consumer torch-2.13.0-cxx11-cpu"),
            # a stable-ABI consumer
            (consumer("stable", cuda_major=13), "torchstack: consumer torch-2.13.0-stable-cu13"),
            # a consumer that only imports torch
            (consumer("python"), "torchstack: consumer torch-python"),
        ],
        ids=["cpu-provider", "cu13-provider", "cxx-consumer", "stable-consumer", "python"],
    )
    def test_text(self, fingerprint: Fingerprint, expected: str) -> None:
        line = whatis_line(fingerprint)
        assert line == expected
        assert "\n" not in line
