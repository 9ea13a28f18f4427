"""Read the dynamic section and dynamic symbols of ELF shared objects through pyelftools.

Only what torchstack decides on is read: DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME,
single symbols looked up through the ELF hash table, and the names of undefined symbols.
Callers pass a seekable binary stream (a memory map of a file, or a wheel member).

Every file is untrusted: whatever pyelftools raises on damaged headers, tables or sections
(ELFParseError, struct.error, OverflowError, IndexError, ...) becomes an `ElfError` naming
the file, and only regular files are opened (a FIFO or a device is refused, never read).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Union

from elftools.common.exceptions import ELFError as _PyElfError
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import ELFHashTable, GNUHashTable
from elftools.elf.sections import Symbol, SymbolTableSection

from torchstack._files import open_regular
from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)

Stream = Union[BinaryIO, mmap.mmap]
ELF_MAGIC = b"\x7fELF"


# What pyelftools (and construct below it) raises on damaged input: values out of range,
# reads past the end, bad counts and offsets, table walks that never end.
_DAMAGE = (
    _PyElfError, ValueError, EOFError, struct.error, OverflowError, IndexError, KeyError,
    ZeroDivisionError, RecursionError, MemoryError, AssertionError,
)


class ElfError(TorchstackError):
    """A file that should be an ELF shared object is not one, or is damaged."""


@contextmanager
def _reading(name: str, what: str = "is a damaged ELF file") -> Iterator[None]:
    """Turn what pyelftools raises on damaged input into an `ElfError` naming the file."""
    try:
        yield
    except _DAMAGE as exc:
        detail = str(exc) or type(exc).__name__
        raise ElfError(f"{name!r} {what}: {detail[:200]}") from exc


@dataclass(frozen=True)
class DynamicInfo:
    """The dynamic-section entries that decide how a shared object's libraries resolve."""

    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    soname: str | None


@contextmanager
def map_file(path: str | os.PathLike[str]) -> Iterator[Stream]:
    """Memory-map a file read-only, so that a 400 MB library costs only the pages read.

    Only a regular file is opened: a FIFO or a device is an `ElfError`, a folder (as with
    open()) an IsADirectoryError.
    """
    with open_regular(path, ElfError) as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            raise ElfError(f"{os.fspath(path)!r} is empty, not an ELF file")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def open_elf(stream: Stream, name: str) -> ELFFile:
    """Parse the ELF header of `stream`; `name` is only used in error messages."""
    stream.seek(0)
    if stream.read(4) != ELF_MAGIC:
        raise ElfError(f"{name!r} is not an ELF file")
    with _reading(name):
        return ELFFile(stream)  # type: ignore[arg-type]  # mmap is a valid stream


def dynamic_segment(elf: ELFFile, name: str) -> DynamicSegment | None:
    """The PT_DYNAMIC segment, or None for an object without one (static or relocatable)."""
    with _reading(name):
        for segment in elf.iter_segments():
            if isinstance(segment, DynamicSegment):
                return segment
    return None


def read_dynamic(stream: Stream, name: str) -> DynamicInfo:
    """DT_NEEDED, DT_RPATH, DT_RUNPATH and DT_SONAME of a shared object."""
    elf = open_elf(stream, name)
    segment = dynamic_segment(elf, name)
    if segment is None:
        return DynamicInfo((), (), (), None)
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    soname = None
    with _reading(name, "has a damaged dynamic section"):
        for tag in segment.iter_tags():
            entry: Any = tag  # pyelftools adds needed/rpath/runpath/soname per tag type
            kind = entry.entry.d_tag
            if kind == "DT_NEEDED":
                needed.append(entry.needed)
            elif kind == "DT_RPATH":
                rpath.extend(p for p in entry.rpath.split(":") if p)
            elif kind == "DT_RUNPATH":
                runpath.extend(p for p in entry.runpath.split(":") if p)
            elif kind == "DT_SONAME":
                soname = entry.soname
    return DynamicInfo(tuple(needed), tuple(rpath), tuple(runpath), soname)


def defined_symbols(stream: Stream, name: str, candidates: tuple[str, ...]) -> frozenset[str]:
    """Which of `candidates` the object defines, looked up in its hash table, not by a scan.

    libtorch_cpu.so has about 74,000 dynamic symbols; a hash lookup reads a handful of pages.
    """
    elf = open_elf(stream, name)
    segment = dynamic_segment(elf, name)
    if segment is None:
        return frozenset()
    found = set()
    with _reading(name, "has a damaged symbol hash table"):
        table = _hash_table(elf, segment)
        if table is None:
            log.debug("%s: no hash table, no symbol looked up", name)
            return frozenset()
        for candidate in candidates:
            symbol = _lookup(table, segment, candidate)
            if symbol is not None and symbol["st_shndx"] != "SHN_UNDEF":
                found.add(candidate)
    log.debug("%s: defines %d of %d looked-up symbols", name, len(found), len(candidates))
    return frozenset(found)


def _hash_table(elf: ELFFile, segment: DynamicSegment) -> GNUHashTable | ELFHashTable | None:
    _, gnu_offset = segment.get_table_offset("DT_GNU_HASH")
    if gnu_offset is not None:
        return GNUHashTable(elf, gnu_offset, segment)
    _, sysv_offset = segment.get_table_offset("DT_HASH")
    if sysv_offset is not None:
        return ELFHashTable(elf, sysv_offset, None, segment)
    return None


def _lookup(
    table: GNUHashTable | ELFHashTable, segment: DynamicSegment, name: str
) -> Symbol | None:
    """pyelftools' lookup, except that a SysV chain that loops is damage, not a hang."""
    if isinstance(table, GNUHashTable):  # its chain walk ends at the end of the file
        return table.get_symbol(name)
    buckets, chains = table.params["buckets"], table.params["chains"]
    if not buckets:
        return None
    index = buckets[ELFHashTable.elf_hash(name) % len(buckets)]
    for _ in range(len(chains) + 1):
        if index == 0:
            return None
        symbol = segment.get_symbol(index)
        if symbol is not None and symbol.name == name:
            return symbol
        index = chains[index]
    raise ValueError("the ELF hash chain loops")


def section_data(stream: Stream, name: str, section_name: str) -> bytes | None:
    """The bytes of the section named `section_name`, None when there is none."""
    elf = open_elf(stream, name)
    with _reading(name, f"has a damaged {section_name} section"):
        section = elf.get_section_by_name(section_name)
        return None if section is None else bytes(section.data())


def undefined_symbols(stream: Stream, name: str) -> frozenset[str]:
    """Names of the dynamic symbols the object imports."""
    elf = open_elf(stream, name)
    with _reading(name, "has a damaged symbol table"):
        section = elf.get_section_by_name(".dynsym")
        if isinstance(section, SymbolTableSection):
            return _undefined_in_table(elf, section)
        symbols = _segment_symbols(elf, name)
        return frozenset(s.name for s in symbols if s["st_shndx"] == "SHN_UNDEF" and s.name)


@dataclass(frozen=True)
class Bindings:
    """A shared object's .dynsym: what it imports without a fallback (strong undefined
    symbols), what it imports weakly (may stay unresolved at load time) and what it exports."""

    imports: frozenset[str]
    weak: frozenset[str]
    exports: frozenset[str]

    @property
    def undefined(self) -> frozenset[str]:
        return self.imports | self.weak


def bindings(stream: Stream, name: str) -> Bindings:
    """The strong and weak imports and the exports of a shared object's .dynsym."""
    elf = open_elf(stream, name)
    with _reading(name, "has a damaged symbol table"):
        section = elf.get_section_by_name(".dynsym")
        if not isinstance(section, SymbolTableSection):
            undefined = frozenset(s.name for s in _segment_symbols(elf, name)
                                  if s["st_shndx"] == "SHN_UNDEF" and s.name)
            return Bindings(undefined, frozenset(), frozenset())
        found: tuple[set[str], set[str], set[str]] = (set(), set(), set())
        for symbol_name, info, shndx in _table_entries(elf, section):
            kind = 2 if shndx != _SHN_UNDEF else 1 if info >> 4 == _STB_WEAK else 0
            found[kind].add(symbol_name)
        return Bindings(*(frozenset(names) for names in found))


# Elf32_Sym and Elf64_Sym, without the byte order: (layout, index of st_name, of st_info,
# of st_shndx)
_SYMBOL_LAYOUTS = {32: ("IIIBBH", 0, 3, 5), 64: ("IBBHQQ", 0, 1, 3)}
_SHN_UNDEF = 0
_STB_WEAK = 2


def _undefined_in_table(elf: ELFFile, section: SymbolTableSection) -> frozenset[str]:
    """The table's undefined names."""
    return frozenset(name for name, _, shndx in _table_entries(elf, section)
                     if shndx == _SHN_UNDEF)


def _table_entries(elf: ELFFile, section: SymbolTableSection) -> Iterator[tuple[str, int, int]]:
    """(name, st_info, st_shndx) of each named symbol, unpacked with struct rather than
    pyelftools' parser, which is slow on the libraries of a CUDA stack (several hundred
    thousand symbols; the figures: bench/README.rst, bench/install.py)."""
    fields, name_at, info_at, shndx_at = _SYMBOL_LAYOUTS[elf.elfclass]
    layout = struct.Struct(("<" if elf.little_endian else ">") + fields)
    if section["sh_entsize"] != layout.size:
        raise ValueError(f"symbol entries of {section['sh_entsize']} bytes, not {layout.size}")
    data = section.data()
    strings = elf.get_section(section["sh_link"]).data()
    for entry in layout.iter_unpack(data[:len(data) - len(data) % layout.size]):
        offset = entry[name_at]
        if offset:
            end = strings.index(b"\0", offset)  # ValueError (damage) without a terminator
            if end > offset:
                yield (strings[offset:end].decode("utf-8", errors="replace"), entry[info_at],
                       entry[shndx_at])


def _segment_symbols(elf: ELFFile, name: str) -> Iterator[Symbol]:
    segment = dynamic_segment(elf, name)
    return iter(()) if segment is None else segment.iter_symbols()
