"""Hypothesis strategies that damage a real ELF64 little-endian shared object (x86_64).

A `Target` knows the byte ranges of the structures torchstack's readers parse (the ELF header,
the program and section headers, the dynamic section, the GNU or SysV hash table, the dynamic
symbols and strings) and the offset and width of their fields. `damaged` overwrites one to
four of them: a whole field (e_phoff, sh_size, a DT_STRTAB value, a hash table's bucket
count, ...) or an aligned word anywhere in a structure, with boundary values, values near
the end of the file, or any value.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile
from hypothesis import strategies as st

STRUCTURES = (".dynamic", ".gnu.hash", ".hash", ".dynsym", ".dynstr")
EXTREMES = (0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32,
            1 << 62, 1 << 63, (1 << 64) - 1)
# (offset, width) of the fields of one entry, ELF64
_EHDR = ((4, 1), (5, 1), (18, 2), (32, 8), (40, 8), (54, 2), (56, 2), (58, 2), (60, 2),
         (62, 2))
_PHDR = ((0, 4), (8, 8), (16, 8), (32, 8), (40, 8))
_SHDR = ((0, 4), (4, 4), (24, 8), (32, 8), (40, 4), (44, 4), (56, 8))
_DYN = ((0, 8), (8, 8))
_HASH_HEADER = ((0, 4), (4, 4), (8, 4), (12, 4))


@dataclass(frozen=True)
class Target:
    """A pristine ELF file, the byte ranges of its structures and the places of its fields."""

    data: bytes
    regions: dict[str, tuple[int, int]]
    fields: dict[str, tuple[tuple[int, int], ...]]  # by structure

    def __repr__(self) -> str:  # hypothesis prints the fixtures of a falsifying example
        return f"Target({len(self.data)} bytes, {sorted(self.regions)})"


def _table(start: int, count: int, size: int, layout: tuple[tuple[int, int], ...]
           ) -> list[tuple[int, int]]:
    return [(start + i * size + offset, width) for i in range(count) for offset, width in layout]


def target_of(data: bytes) -> Target:
    elf = ELFFile(io.BytesIO(data))
    phoff, phnum, phsize = elf["e_phoff"], elf["e_phnum"], elf["e_phentsize"]
    shoff, shnum, shsize = elf["e_shoff"], elf["e_shnum"], elf["e_shentsize"]
    regions = {
        "elf header": (0, elf["e_ehsize"]),
        "program headers": (phoff, phoff + phnum * phsize),
        "section headers": (shoff, shoff + shnum * shsize),
    }
    fields = {
        "elf header": _EHDR,
        "program headers": tuple(_table(phoff, phnum, phsize, _PHDR)),
        "section headers": tuple(_table(shoff, shnum, shsize, _SHDR)),
    }
    for section in elf.iter_sections():
        if section.name in STRUCTURES and section["sh_size"]:
            start, size = section["sh_offset"], section["sh_size"]
            regions[section.name] = (start, start + size)
            if section.name == ".dynamic":
                fields[section.name] = tuple(_table(start, size // 16, 16, _DYN))
            elif section.name.endswith(".hash"):
                fields[section.name] = tuple(_table(start, 1, 0, _HASH_HEADER))
    return Target(data, regions, fields)


def _values(target: Target) -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from(EXTREMES),
        st.integers(0, (1 << 64) - 1),
        st.integers(1 << 63, (1 << 64) - 1),  # negative as a signed offset or size
        st.integers(-64, 64).map(lambda d: len(target.data) + d),  # around the end of the file
    )


@st.composite
def damaged(draw: st.DrawFn, target: Target) -> bytes:
    """`target` with 1 to 4 fields or aligned words overwritten (little-endian)."""
    data = bytearray(target.data)
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            at, width = draw(st.sampled_from(target.fields[draw(st.sampled_from(
                sorted(target.fields)))]))
        else:
            start, end = target.regions[draw(st.sampled_from(sorted(target.regions)))]
            width = draw(st.sampled_from((1, 2, 4, 8)))
            at = start + width * draw(st.integers(0, max(0, (end - start) // width - 1)))
        value = draw(_values(target)) & ((1 << (8 * width)) - 1)
        data[at:at + width] = value.to_bytes(width, "little")
    return bytes(data)
