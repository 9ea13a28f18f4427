"""torchstack.index.torchsymbols: torch wheels' exports by range reads from a real HTTP server on
127.0.0.1, and the release a dispatcher-bound consumer was built on, bracketed by them.

The g++-built releases of symbolwheels.py make each case; the real torch wheels show the two
layouts met on indexes: the 2.13.0 CPU wheel, whose libraries keep their tables at the start
(read for a few MB), and PyPI's 2.14.1, whose libtorch_cpu.so patchelf rewrote with the hash
table and strings at the end (refused rather than inflated whole).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile
from packaging.version import Version
from support.indexserver import IndexServer
from support.symbolwheels import build_symbol_wheels

from torchstack.index import torchsymbols
from torchstack.index.simple import SimpleIndex
from torchstack.index.torchsymbols import BuiltOn, TorchSymbols, built_on

COW = "_ZN3c104impl3cow23materialize_cow_storageEi"
CALLER_IMPORTS = frozenset({"_ZN3c104keptEi", "_ZN2at7kept_opEi", "aoti_torch_kept", COW})


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_symbol_wheels(tmp_path_factory)


@pytest.fixture()
def served(wheels: dict[str, Path]) -> Any:
    with IndexServer() as server:
        server.add_wheel(wheels["old"], upload_time="2026-06-17T21:00:00Z")
        server.add_wheel(wheels["new"], upload_time="2026-07-08T16:00:00Z")
        yield server


def torch_files(server: IndexServer) -> tuple[SimpleIndex, list[Any]]:
    index = SimpleIndex(server.index_url)
    return index, index.files("torch")


class TestVerify:
    def test_by_ranges(self, served: IndexServer) -> None:
        index, files = torch_files(served)
        symbols = TorchSymbols()
        new = next(f for f in files if "2.13.0" in f.filename)
        check = symbols.verify(index, new, CALLER_IMPORTS, ["libc10.so"])
        assert (check.needed, check.missing) == (4, (COW,))
        assert check.provider == "torch 2.13.0+cpu"
        # the exports are kept: a second question reads nothing more
        fetched = dict(symbols.fetched)
        symbols.verify(index, new, {"_ZN3c104keptEi"}, [])
        assert symbols.fetched == fetched

    def test_upload_time_is_read(self, served: IndexServer) -> None:
        _, files = torch_files(served)
        assert {f.upload_time for f in files} == {"2026-06-17T21:00:00Z", "2026-07-08T16:00:00Z"}


class TestBuiltOn:
    @pytest.mark.parametrize(
        ("imports", "uploaded", "release"),
        [
            # needs the symbol 2.13 dropped: the bracket is 2.12.1 alone
            (CALLER_IMPORTS, None, "2.12.1"),
            # symbols both releases export, two minor series: ambiguous, nothing picked
            (CALLER_IMPORTS - {COW}, None, None),
            # ... unless the consumer was uploaded before 2.13.0 came out
            (CALLER_IMPORTS - {COW}, "2026-07-01T00:00:00Z", "2.12.1"),
            # a symbol no release exports
            (CALLER_IMPORTS | {"_ZN3c106absentEv"}, None, None),
        ],
        ids=["dropped-symbol", "ambiguous", "upload-time", "none-exports"],
    )
    def test_bracket(self, served: IndexServer, imports: frozenset[str], uploaded: str | None,
                     release: str | None) -> None:
        index, files = torch_files(served)
        found = built_on(TorchSymbols(), index, files, imports, [], uploaded, Version("2.13.0"))
        assert found.release == release, found.evidence

    def test_evidence_is_said(self, served: IndexServer) -> None:
        index, files = torch_files(served)
        found = built_on(TorchSymbols(), index, files, CALLER_IMPORTS, [], None,
                         Version("2.12.1"))
        assert found == BuiltOn("2.12.1", "built on torch 2.12 by its symbols: all 4 resolve "
                                          "in 2.12.1, not in the neighbours")
        found = built_on(TorchSymbols(), index, files, CALLER_IMPORTS - {COW}, [], None,
                         Version("2.13.0"))
        assert found.evidence == ("its 3 libtorch symbols resolve in torch 2.13.0, 2.12.1, "
                                  "so the release it was built on is ambiguous")


def real_exports(wheel: Path, library: str) -> frozenset[str]:
    with zipfile.ZipFile(wheel) as archive:
        section = ELFFile(io.BytesIO(archive.read(f"torch/lib/{library}"))) \
            .get_section_by_name(".dynsym")
        return frozenset(s.name for s in section.iter_symbols()  # type: ignore[union-attr]
                         if s.name and s["st_shndx"] != "SHN_UNDEF")


class TestRealLayouts:
    def test_tables_at_the_start(self, real_wheel: Any) -> None:
        wheel = real_wheel("torch-2.13.0")
        with IndexServer([wheel]) as server:
            index = SimpleIndex(server.index_url)
            file = index.files("torch")[0]
            symbols = TorchSymbols()
            found = symbols.exports(index, file, ["libtorch_cpu.so"])
        expected = real_exports(wheel, "libc10.so") | real_exports(wheel, "libtorch_cpu.so")
        assert found == expected
        # the tables, not the 114 MB of packed libtorch_cpu.so
        assert symbols.fetched[file.filename] < 4 << 20

    def test_tables_moved_to_the_end(self, cuda_stack: dict[str, Path]) -> None:
        with IndexServer([cuda_stack["torch"]]) as server:
            index = SimpleIndex(server.index_url)
            file = index.files("torch")[0]
            symbols = TorchSymbols()
            with pytest.raises(torchsymbols.TorchstackError, match="libtorch_cpu.so': needs "
                                                                  r"\d+ inflated bytes"):
                symbols.exports(index, file, ["libtorch_cpu.so"])
            # the next consumer's question fails at once: no byte more of this wheel is read
            fetched = dict(symbols.fetched)
            with pytest.raises(torchsymbols.TorchstackError, match=r"libtorch_cpu\.so"):
                symbols.exports(index, file, ["libtorch_cuda.so", "libc10_cuda.so"])
            assert symbols.fetched == fetched


class TestBadInput:
    @pytest.mark.parametrize(
        ("library", "message"),
        [
            # an ELF header whose fields lie (program headers of no size, past the member)
            (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\x3e\x00" + bytes(4)
             + bytes(8) + (64).to_bytes(8, "little") + bytes(16) + (56).to_bytes(2, "little")
             + (900).to_bytes(2, "little") + bytes(6), "is a damaged ELF file"),
            # not ELF at all
            (b"MZ" + bytes(200), "is not an ELF file"),
        ],
        ids=["tables-lie", "not-elf"],
    )
    def test_lying_tables_are_an_error_not_an_answer(
            self, tmp_path: Path, library: bytes, message: str) -> None:
        from support.synthetic import version_py
        from support.wheelbuild import build_wheel

        wheel = build_wheel(tmp_path, "torch", "2.13.0+cpu", {
            "torch/version.py": version_py("2.13.0+cpu").encode(),
            "torch/lib/libc10.so": library})
        with IndexServer([wheel]) as server:
            index = SimpleIndex(server.index_url)
            with pytest.raises(torchsymbols.TorchstackError, match=message):
                TorchSymbols().exports(index, index.files("torch")[0], [])
