"""torchstack.doctor._dynstr: the .dynstr prefilter, on small real objects and on what is no ELF."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from torchstack.doctor._dynstr import dynstr_span, may_name_torch

STUB_C = "int stub(void) { return 0; }\n"


def gcc_library(out: Path, *, soname: str, needs: tuple[Path, ...] = ()) -> Path:
    source = out.with_suffix(".c")
    source.write_text(STUB_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source),
                    f"-Wl,-soname,{soname}", "-Wl,--no-as-needed", *map(str, needs)], check=True)
    return out


class TestDynstr:
    @pytest.fixture(scope="class")
    def libraries(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
        folder = tmp_path_factory.mktemp("dynstr")
        c10 = gcc_library(folder / "libc10.so", soname="libc10.so")
        libm = Path("/lib/x86_64-linux-gnu/libm.so.6")
        return {
            "consumer": gcc_library(folder / "ext.so", soname="ext.so", needs=(c10,)),
            "plain": gcc_library(folder / "plain.so", soname="plain.so", needs=(libm,)),
        }

    @pytest.mark.parametrize(("key", "expected"), [
        ("consumer", True),  # DT_NEEDED libc10.so
        ("plain", False),  # libm and libc only
    ])
    def test_real_objects(self, libraries: dict[str, Path], key: str, expected: bool) -> None:
        data = libraries[key].read_bytes()
        span = dynstr_span(data)
        assert span is not None and data[span[0]] == 0  # .dynstr starts with its empty name
        assert may_name_torch(data) is expected

    @pytest.mark.parametrize("data", [
        b"not an ELF file at all",  # not ELF
        b"\x7fELF\x02\x01\x01" + b"\0" * 9,  # a header cut short
    ], ids=["text", "truncated"])
    def test_what_it_cannot_read_stays_a_candidate(self, data: bytes) -> None:
        assert dynstr_span(data) is None
        assert may_name_torch(data) is True
