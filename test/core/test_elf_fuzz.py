"""Damaged ELF files: every reader returns or raises `ElfError` naming the file, never hangs.

Real shared objects built by g++ (test/support/synthetic.py; a SysV-hash libc10 built here; the real
libc10.so of a cached torch tree when there is one) get random bytes and words (0, -1, 2**31,
...) written into one of their structures: the ELF header, the program and section headers,
the dynamic section, the GNU or SysV hash table, the dynamic symbols and strings. pyelftools
raises a dozen kinds of exception on such input (ELFParseError, struct.error, OverflowError,
IndexError, ZeroDivisionError, ...); torchstack must turn each into one `torchstack: error:`
line and exit 2, through the library API, the loader and the CLI, from wheels and from trees.
Hypothesis runs derandomized (seeded by the test), without an example database.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.badinput import assert_one_error, deadline, run_cli
from support.elfmutate import Target, damaged, target_of
from support.synthetic import LIBC10, PYTHON_SITE, SyntheticLibs, SyntheticWheels, install_prefix

from torchstack.elf import loader, reader, symbols

pytest_plugins = ["support.synthetic"]

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
NAME = "damaged/libfuzz.so"
READERS: dict[str, Callable[[reader.Stream], object]] = {
    "defined-symbols": lambda s: reader.defined_symbols(s, NAME, symbols.ABI_PROBES),
    "dynamic-section": lambda s: reader.read_dynamic(s, NAME),
    "undefined-symbols": lambda s: reader.undefined_symbols(s, NAME),
    "elf-kind": lambda s: loader.elf_kind(s, NAME),
    "comment": lambda s: reader.section_data(s, NAME, ".comment"),
}


def assert_read_or_refused(data: bytes, readers: dict[str, Callable[[reader.Stream], object]]
                           ) -> None:
    """Each reader returns, or raises `ElfError` naming the file; within 10 s each."""
    for read in readers.values():
        try:
            with deadline(10):
                read(io.BytesIO(data))
        except reader.ElfError as exc:
            assert NAME in str(exc)


@pytest.fixture(scope="module")
def sysv_libc10(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libc10 with only a SysV DT_HASH table (g++ links a GNU one by default)."""
    root = tmp_path_factory.mktemp("sysv")
    (root / "libc10.cpp").write_text(LIBC10, encoding="utf-8")
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-D_GLIBCXX_USE_CXX11_ABI=1",
                    "-Wl,--hash-style=sysv", "-Wl,-soname,libc10.so", "-o",
                    str(root / "libc10.so"), str(root / "libc10.cpp")], check=True)
    return root / "libc10.so"


@pytest.fixture(scope="module")
def targets(synthetic_libs: SyntheticLibs, sysv_libc10: Path) -> dict[str, Target]:
    found = {key: target_of(synthetic_libs.read(key))
             for key in ("cxx11/libc10.so", "cu13/libc10_cuda.so", "cxx11/_C.so")}
    found["sysv/libc10.so"] = target_of(sysv_libc10.read_bytes())
    assert ".hash" in found["sysv/libc10.so"].regions
    assert ".gnu.hash" in found["cxx11/libc10.so"].regions
    return found


class TestReaders:
    @pytest.mark.parametrize(
        "key",
        [
            # GNU hash table, the ABI probe symbols defined
            "cxx11/libc10.so",
            # SysV hash table only: pyelftools' chain walk
            "sysv/libc10.so",
            # DT_NEEDED on libcudart.so.13
            "cu13/libc10_cuda.so",
            # a consumer: undefined c10/at symbols
            "cxx11/_C.so",
        ],
    )
    @FUZZ
    @given(data=st.data())
    def test_damaged_structure(
        self, targets: dict[str, Target], key: str, data: st.DataObject
    ) -> None:
        assert_read_or_refused(data.draw(damaged(targets[key])), READERS)

    @FUZZ
    @given(data=st.data())
    def test_loader_reads_a_damaged_file(
        self, targets: dict[str, Target], tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject,
    ) -> None:
        # through a memory map of a real file, as ld.so's search does
        path = tmp_path_factory.getbasetemp() / "loader" / "libc10.so"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data.draw(damaged(targets["cxx11/libc10.so"])))
        try:
            with deadline(10):
                loader.read_object(path)
        except (reader.ElfError, loader.LoaderError) as exc:
            assert str(path) in str(exc)

    @FUZZ
    @given(data=st.data())
    def test_sysv_chains_that_loop(self, targets: dict[str, Target], data: st.DataObject) -> None:
        # buckets and chains of small indices: cycles are likely, a lookup must still end
        target = targets["sysv/libc10.so"]
        start, _ = target.regions[".hash"]
        nbucket, nchain = struct.unpack_from("<II", target.data, start)
        entries = data.draw(st.lists(st.integers(0, nchain + 1), min_size=nbucket + nchain,
                                     max_size=nbucket + nchain))
        damaged_data = bytearray(target.data)
        struct.pack_into(f"<{len(entries)}I", damaged_data, start + 8, *entries)
        assert_read_or_refused(bytes(damaged_data), {"defined": READERS["defined-symbols"]})

    def test_real_libc10(self, real_tree: Callable[[str], Path]) -> None:
        libc10 = real_tree("torch-2.13.0") / "torch" / "lib" / "libc10.so"
        target = target_of(libc10.read_bytes())
        readers = {k: READERS[k] for k in ("defined-symbols", "dynamic-section", "elf-kind")}

        @settings(FUZZ, max_examples=40)
        @given(data=st.data())
        def fuzz(data: st.DataObject) -> None:
            assert_read_or_refused(data.draw(damaged(target)), readers)

        fuzz()


@dataclass(frozen=True)
class Placed:
    """Where a damaged library goes: a synthetic wheel, the member, and the layout."""

    wheel: str
    member: str
    key: str
    layout: str  # "wheel", "tree" (site-packages) or "prefix"


PLACES = {
    "libc10-wheel": Placed("torch-cpu-cxx11", "torch/lib/libc10.so", "cxx11/libc10.so", "wheel"),
    "libc10-tree": Placed("torch-cpu-cxx11", "torch/lib/libc10.so", "cxx11/libc10.so", "tree"),
    "libc10-cuda-tree": Placed("torch-cu130", "torch/lib/libc10_cuda.so", "cu13/libc10_cuda.so",
                               "tree"),
    "consumer-prefix": Placed("vision-cxx11", "fakevision/_C.so", "cxx11/_C.so", "prefix"),
}


def replace_member(source: Path, target: Path, member: str, data: bytes) -> Path:
    """A copy of a wheel with one member's content replaced."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, data if name == member else zin.read(name))
    return target


class TestCommand:
    @pytest.mark.parametrize("place", list(PLACES))
    @settings(FUZZ, max_examples=150)
    @given(data=st.data())
    def test_fingerprint_and_check(
        self, synthetic_wheels: SyntheticWheels, targets: dict[str, Target],
        tmp_path_factory: pytest.TempPathFactory, place: str, data: st.DataObject,
    ) -> None:
        spec = PLACES[place]
        root = tmp_path_factory.getbasetemp() / "command" / place
        wheel = synthetic_wheels[spec.wheel]
        if not root.exists():
            install_prefix(wheel, root / "prefix")
        library = data.draw(damaged(targets[spec.key]))
        if spec.layout == "wheel":
            path = replace_member(wheel, root / wheel.name, spec.member, library)
        else:
            path = root / "prefix"
            (path / PYTHON_SITE / spec.member).write_bytes(library)
            path = path / PYTHON_SITE if spec.layout == "tree" else path
        code, out, err = run_cli(["fingerprint", os.fspath(path)])
        if code == 0:
            assert err == "" and out.startswith(("torch ", "fakevision ")), out + err
        else:
            assert_one_error(code, err, spec.member)
        provider = os.fspath(synthetic_wheels["torch-cpu-cxx11"])
        argv = ["check", provider, os.fspath(path)] if spec.wheel.startswith("vision") else [
            "check", os.fspath(path), os.fspath(synthetic_wheels["vision-cxx11"])]
        code, out, err = run_cli(argv)
        if code in (0, 1):
            assert err == "" and out.startswith(("compatible: ", "incompatible: ")), out + err
        else:
            assert_one_error(code, err, spec.member)
