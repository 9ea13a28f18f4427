"""The dynamic symbols and DT_NEEDED of one shared object in a zip member, from the inflated
prefix of the member only (torchstack.index.wheelelf reads whole wheels with it).

Where the tables are is known without the section headers or the dynamic section (both lie
near the end of the file): GNU ld places .note*, .hash and/or .gnu.hash, .dynsym and .dynstr
in that order straight after the program headers, in the first loaded segment; a hash table
gives the number of symbols, and .dynstr holds the names of DT_NEEDED, DT_SONAME and RPATH
among the symbol names (a library's file name that is not the object's own counts as needed).
An object laid out otherwise (patchelf moves .dynstr to the end when it grows an RPATH) is
read whole, up to the prefix's bound; beyond that `BeyondBound` says so, never a guess.
"""

from __future__ import annotations

import io
import logging
import struct
import zlib

from torchstack.elf import linkclass, reader
from torchstack.errors import TorchstackError
from torchstack.index import _zipdir
from torchstack.index._http import size_text

log = logging.getLogger(__name__)

_FIRST_CHUNK = 16 << 10  # packed bytes asked for first; each further request doubles
_MAX_CHUNK = 1 << 20
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
_GNU_HASH = struct.Struct("<4I")
_PT_LOAD, _PT_NOTE = 1, 4


class WheelElfError(TorchstackError):
    """A wheel whose shared objects cannot be read by ranges, or that is no torch consumer."""


class BeyondBound(WheelElfError):
    """A shared object whose tables lie beyond the inflation bound."""


class MemberPrefix:
    """The inflated start of one zip member, grown on demand and never past `bound` bytes."""

    def __init__(self, ranges: _zipdir._Ranges, member: _zipdir.Member, bound: int) -> None:
        if member.method not in (0, 8):
            raise WheelElfError(f"{member.name!r} uses compression method {member.method}")
        self.ranges, self.member, self.bound = ranges, member, bound
        self.data = b""
        self._next = _zipdir.packed_start(ranges, member)
        self._end = self._next + member.compressed
        self._chunk = _FIRST_CHUNK
        self._inflater = zlib.decompressobj(-zlib.MAX_WBITS) if member.method == 8 else None

    def need(self, end: int) -> bytes:
        """The first `end` bytes of the member (inflating more if needed)."""
        if end > min(self.bound, self.member.uncompressed):
            if end > self.member.uncompressed:
                raise WheelElfError(f"{self.member.name!r}: a table points past its end "
                                    f"({end} of {self.member.uncompressed} bytes)")
            raise BeyondBound(f"{self.member.name!r}: needs {end} inflated bytes, over the "
                              f"bound of {size_text(self.bound)}")
        while len(self.data) < end:
            self._inflate_more()
        return self.data

    def _inflate_more(self) -> None:
        if self._next >= self._end:
            raise WheelElfError(f"{self.member.name!r}: packed data ends early")
        length = min(self._chunk, self._end - self._next)
        packed = self.ranges.read(self._next, length)
        self._next += length
        self._chunk = min(self._chunk * 2, _MAX_CHUNK)
        if self._inflater is None:
            self.data += packed
            return
        try:
            self.data += self._inflater.decompress(packed)
        except zlib.error as exc:
            raise WheelElfError(f"{self.member.name!r} does not inflate: {exc}") from exc


def object_symbols(prefix: MemberPrefix) -> tuple[linkclass.ObjectSymbols, str]:
    """The DT_NEEDED and undefined symbols of one shared object, and how they were read."""
    name = prefix.member.name
    try:
        found = _tables(prefix)
    except (struct.error, IndexError, ValueError) as exc:
        raise WheelElfError(f"{name!r}: damaged ELF tables ({exc})") from exc
    if found is not None:
        return found, "tables"
    log.debug("%s: not laid out as GNU ld or lld do; read whole", name)
    stream = io.BytesIO(prefix.need(prefix.member.uncompressed))
    needed = reader.read_dynamic(stream, name).needed
    whole = reader.bindings(stream, name)
    return linkclass.ObjectSymbols(name, frozenset(needed), whole.undefined, whole.weak,
                                   whole.exports), "whole"


def object_exports(prefix: MemberPrefix) -> frozenset[str]:
    """The names of the symbols one shared object defines (a torch library's exports)."""
    name = prefix.member.name
    try:
        table = _symbol_table(prefix)
    except (struct.error, IndexError, ValueError) as exc:
        raise WheelElfError(f"{name!r}: damaged ELF tables ({exc})") from exc
    if table is None:
        log.debug("%s: not laid out as GNU ld or lld do; read whole", name)
        stream = io.BytesIO(prefix.need(prefix.member.uncompressed))
        return reader.bindings(stream, name).exports
    entries, strings, _, _ = table
    return frozenset(strings.at(e[0]) for e in entries if e[3] != 0 and e[0])


def _tables(prefix: MemberPrefix) -> linkclass.ObjectSymbols | None:
    """The symbols from the tables after the program headers; None for another layout."""
    table = _symbol_table(prefix)
    if table is None:
        return None
    entries, strings, limit, dynstr_at = table
    undefined = frozenset(strings.at(e[0]) for e in entries if e[3] == 0 and e[0])
    weak = frozenset(strings.at(e[0]) for e in entries if e[3] == 0 and e[0] and e[1] >> 4 == 2)
    exports = frozenset(strings.at(e[0]) for e in entries if e[3] != 0 and e[0])
    last = max((e[0] + len(strings.at(e[0])) for e in entries if e[0]), default=0)
    every, end = strings.scan(limit - dynstr_at)
    if end < last:  # the table has a hole before its last symbol name: not GNU ld's
        return None
    own = prefix.member.name.rsplit("/", 1)[-1]
    libraries = {s for s in every if ".so" in s and "/" not in s and s != own}
    return linkclass.ObjectSymbols(prefix.member.name, frozenset(libraries), undefined, weak,
                                   exports)


_Entries = list[tuple[int, int, int, int, int, int]]


def _symbol_table(prefix: MemberPrefix) -> tuple[_Entries, _Strings, int, int] | None:
    """.dynsym's entries, its strings, the end of the first loaded segment and where .dynstr
    starts; None for a layout other than GNU ld's (hash tables, .dynsym, .dynstr) or lld's
    (.dynsym and .dynstr first, the hash tables after them)."""
    header = prefix.need(_EHDR.size)
    if header[:4] != reader.ELF_MAGIC:
        raise WheelElfError(f"{prefix.member.name!r} is not an ELF file")
    if header[4] != 2 or header[5] != 1:  # 64-bit little-endian only: others are read whole
        return None
    fields = _EHDR.unpack_from(header)
    phoff, phentsize, phnum = fields[5], fields[9], fields[10]
    if phentsize != _PHDR.size:
        return None
    phdr_end = phoff + phnum * phentsize
    data = prefix.need(phdr_end)
    phdrs = [_PHDR.unpack_from(data, phoff + i * phentsize) for i in range(phnum)]
    first = [p[2] + p[5] for p in phdrs if p[0] == _PT_LOAD and p[2] == 0]
    tables_at = _after_notes(phdr_end, [(p[2], p[5]) for p in phdrs if p[0] == _PT_NOTE])
    if not first:
        return None
    limit = first[0]
    found = _hash_tables(prefix, tables_at, limit) or _leading_dynsym(prefix, tables_at, limit)
    if found is None:
        return None
    count, dynsym_at = found
    dynstr_at = dynsym_at + count * _SYM.size
    data = prefix.need(dynstr_at + 1)
    if data[dynsym_at:dynsym_at + _SYM.size] != bytes(_SYM.size) or data[dynstr_at] != 0:
        return None
    entries = [_SYM.unpack_from(data, dynsym_at + i * _SYM.size) for i in range(count)]
    return entries, _Strings(prefix, dynstr_at), limit, dynstr_at


def _leading_dynsym(prefix: MemberPrefix, at: int, limit: int) -> tuple[int, int] | None:
    """The number of dynamic symbols when .dynsym comes first (lld, torch's libraries): its
    entries are read until one cannot be a symbol, which is where .dynstr begins (a NUL,
    then a name's letters as binding and type fields that no symbol has)."""
    if not _null_symbol(prefix, at, limit):
        return None
    count, position = 1, at + _SYM.size
    while position + _SYM.size <= limit:
        data = prefix.need(position + _SYM.size)
        _, info, other, shndx, _, _ = _SYM.unpack_from(data, position)
        if info >> 4 not in (0, 1, 2, 10) or info & 0xF not in (0, 1, 2, 3, 4, 5, 6, 10) \
                or other > 3 or (0xFF00 <= shndx < 0xFFF1) or shndx > 0xFFF2:
            break
        count, position = count + 1, position + _SYM.size
    return (count, at) if count > 1 else None


def _after_notes(phdr_end: int, notes: list[tuple[int, int]]) -> int:
    """Where the hash tables start: after the notes that follow the program headers at once."""
    end = _align(phdr_end, 4)
    for offset, size in sorted(notes):
        if offset == end:
            end = _align(offset + size, 4)
    return _align(end, 8)


def _hash_tables(prefix: MemberPrefix, at: int, limit: int) -> tuple[int, int] | None:
    """The number of dynamic symbols and where .dynsym starts, from the hash tables GNU ld
    puts at `at` (.hash, .gnu.hash, or both in that order), all before `limit` (the end of
    the first loaded segment); None when neither reading fits."""
    if at + 8 > limit:
        return None
    nbucket, nchain = struct.unpack_from("<2I", prefix.need(at + 8), at)
    sysv_end = _align(at + 8 + 4 * (nbucket + nchain), 8)
    if nbucket and nchain and sysv_end < limit:
        after = _gnu_hash(prefix, sysv_end, limit)
        if after is not None and after[0] == nchain:
            return after
        if _null_symbol(prefix, sysv_end, limit):
            return nchain, sysv_end
    found = _gnu_hash(prefix, at, limit)
    return found if found is not None and _null_symbol(prefix, found[1], limit) else None


def _null_symbol(prefix: MemberPrefix, at: int, limit: int) -> bool:
    """Whether .dynsym can start at `at`: its first entry is all zero."""
    end = at + _SYM.size
    return end <= limit and prefix.need(end)[at:end] == bytes(_SYM.size)


def _gnu_hash(prefix: MemberPrefix, at: int, limit: int) -> tuple[int, int] | None:
    """The number of dynamic symbols and where .dynsym starts, from a GNU hash table at `at`;
    None when the table would reach `limit`."""
    if at + 16 > limit:
        return None
    nbuckets, symoffset, bloom_size, _ = _GNU_HASH.unpack_from(prefix.need(at + 16), at)
    buckets_at = at + 16 + bloom_size * 8
    chains_at = buckets_at + nbuckets * 4
    if not nbuckets or chains_at > limit:
        return None
    data = prefix.need(chains_at)
    buckets = struct.unpack_from(f"<{nbuckets}I", data, buckets_at)
    index = max(buckets, default=0)
    if index < symoffset:
        return symoffset, _align(chains_at, 8)
    while True:  # walk the last chain to its end bit
        position = chains_at + (index - symoffset) * 4
        if position + 4 > limit:
            return None
        (value,) = struct.unpack_from("<I", prefix.need(position + 4), position)
        index += 1
        if value & 1:
            return index, _align(chains_at + (index - symoffset) * 4, 8)


class _Strings:
    """NUL-terminated strings of .dynstr, inflated as far as they reach."""

    def __init__(self, prefix: MemberPrefix, start: int) -> None:
        self.prefix, self.start = prefix, start

    def at(self, offset: int) -> str:
        position = self.start + offset
        while True:
            data = self.prefix.data
            end = data.find(b"\0", position)
            if end >= 0:
                return data[position:end].decode("ascii", "replace")
            if len(data) >= self.prefix.member.uncompressed:
                raise WheelElfError(f"{self.prefix.member.name!r}: a string runs past its end")
            self.prefix.need(min(len(data) + 4096, self.prefix.member.uncompressed))

    def scan(self, size: int) -> tuple[list[str], int]:
        """Every string of .dynstr in order (DT_NEEDED, DT_SONAME and RPATH among the symbol
        names, wherever the linker put them) up to the first empty or unprintable one, which
        is the next section, or `size` bytes; and the offset where the scan stopped."""
        found, offset = [], 1
        while offset < size:
            text = self.at(offset)
            if not text or not text.isprintable():
                break
            found.append(text)
            offset += len(text) + 1
        return found, offset


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment
