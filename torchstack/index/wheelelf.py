"""A consumer wheel's link class and abi_tag before install, from range reads of its ELF files.

Read per wheel: its tail and zip central directory, METADATA and `<package>/version.py`; per
shared object, only the inflated prefix that holds the ELF header, the program headers, the
hash tables, .dynsym and .dynstr. A deflated member cannot be entered in the middle, so
its prefix is inflated as a stream and the reads stop once the tables are in hand.

Where the tables are is known without the section headers or the dynamic section (both lie
near the end of the file): GNU ld places .note*, .hash and/or .gnu.hash, .dynsym and .dynstr
in that order straight after the program headers, in the first loaded segment; a hash table
gives the number of symbols, and .dynstr holds the names of DT_NEEDED, DT_SONAME and RPATH
among the symbol names (a library's file name that is not the object's own counts as needed).
An object
laid out otherwise (patchelf moves .dynstr to the end when it grows an RPATH) is read whole,
up to `max_inflated` bytes; beyond that it is reported as not read, never guessed at.

The classification itself is the fingerprint's (torchstack.linkclass, fingerprint.py):
the prediction is a `Fingerprint` computed from the same evidence install will see.
"""

from __future__ import annotations

import io
import logging
import struct
import zlib
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from torchstack import elf, linkclass
from torchstack.distributions import Distribution, normalize_name, parse_headers
from torchstack.errors import TorchstackError
from torchstack.fingerprint import Fingerprint, built_against_release, consumer_fingerprint
from torchstack.index import _zipdir
from torchstack.index._http import size_text

log = logging.getLogger(__name__)

MAX_INFLATED = 64 << 20  # the most of one shared object inflated to find its tables
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


@dataclass(frozen=True)
class ObjectRead:
    """How one shared object was read: `tables` (the prefix only), `whole`, or `beyond`."""

    name: str
    how: str
    inflated: int
    size: int


@dataclass
class Prediction:
    """A consumer wheel's fingerprint as predicted, and what reading it cost."""

    fingerprint: Fingerprint | None
    wheel_size: int
    bytes_read: int
    objects: list[ObjectRead] = field(default_factory=list)
    shim_floor: str | None = None  # the oldest torch with every stable C shim used

    @property
    def unread(self) -> list[ObjectRead]:
        return [o for o in self.objects if o.how == "beyond"]

    def _sources(self, fingerprint: Fingerprint) -> str:
        """Where the release floor of a stable consumer comes from, when they differ."""
        required = built_against_release(fingerprint.requires_torch or "", "stable")
        if self.shim_floor is None or (required is not None
                                       and Version(required) == Version(self.shim_floor)):
            return ""
        said = f"Requires-Dist torch{fingerprint.requires_torch}" if required else \
            "no torch in Requires-Dist"
        return f" [{said}; its C shims need torch>={self.shim_floor}]"

    def summary(self, label: str, release: str | None = None) -> str:
        """One report line: `xformers 0.0.35: stable, torch>=2.10 (cu12)` and the like;
        `release`: the torch a C++ consumer naming none is to be built on."""
        fingerprint = self.fingerprint
        if fingerprint is None:
            return f"{label}: does not depend on torch"
        head = f"{fingerprint.name} {fingerprint.version}: {fingerprint.link}"
        if fingerprint.link == "cxx" and fingerprint.torch.release is None and release:
            tag = fingerprint.abi_tag.replace("-unknown-", f"-{release}-", 1)
            text = f"{head}, needs {tag} exactly (no torch release in its metadata: taken " \
                f"as built on {release})"
        elif fingerprint.link == "cxx":
            text = f"{head}, needs {fingerprint.abi_tag} exactly"
        elif fingerprint.link == "stable":
            flavour = fingerprint.abi_tag.rsplit("-", 1)[-1]
            text = f"{head}, torch>={fingerprint.torch.release or '?'} ({flavour})"
            text += self._sources(fingerprint)
        else:
            text = f"{head}, torch{fingerprint.requires_torch or ' (any release)'}"
        if self.unread:
            text += (f"; {len(self.unread)} shared object(s) not read (tables beyond "
                     f"{size_text(self.unread[0].inflated)})")
        return text


class _Counted:
    """A range reader that counts the bytes it fetched."""

    def __init__(self, read: _zipdir.Reader) -> None:
        self._read, self.fetched = read, 0

    def __call__(self, offset: int, length: int) -> bytes:
        data = self._read(offset, length)
        self.fetched += len(data)
        return data


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
    log.debug("%s: not laid out as GNU ld does; read whole", name)
    stream = io.BytesIO(prefix.need(prefix.member.uncompressed))
    needed = elf.read_dynamic(stream, name).needed
    undefined = elf.undefined_symbols(stream, name)
    return linkclass.ObjectSymbols(name, frozenset(needed), undefined), "whole"


def _tables(prefix: MemberPrefix) -> linkclass.ObjectSymbols | None:
    """The symbols from the tables after the program headers; None for another layout."""
    header = prefix.need(_EHDR.size)
    if header[:4] != elf.ELF_MAGIC:
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
    found = _hash_tables(prefix, tables_at, limit)
    if found is None:
        return None
    count, dynsym_at = found
    dynstr_at = dynsym_at + count * _SYM.size
    data = prefix.need(dynstr_at + 1)
    if data[dynsym_at:dynsym_at + _SYM.size] != bytes(_SYM.size) or data[dynstr_at] != 0:
        return None
    entries = [_SYM.unpack_from(data, dynsym_at + i * _SYM.size) for i in range(count)]
    strings = _Strings(prefix, dynstr_at)
    undefined = frozenset(strings.at(e[0]) for e in entries if e[3] == 0 and e[0])
    last = max((e[0] + len(strings.at(e[0])) for e in entries if e[0]), default=0)
    every, end = strings.scan(limit - dynstr_at)
    if end < last:  # the table has a hole before its last symbol name: not GNU ld's
        return None
    own = prefix.member.name.rsplit("/", 1)[-1]
    libraries = {s for s in every if ".so" in s and "/" not in s and s != own}
    return linkclass.ObjectSymbols(prefix.member.name, frozenset(libraries), undefined)


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


# -- whole wheels ----------------------------------------------------------------------


class _RemoteFiles:
    """The small members of a remote wheel that the fingerprint reads (METADATA, version.py)."""

    def __init__(self, ranges: _zipdir._Ranges, entries: list[_zipdir.Member],
                 label: str) -> None:
        self.ranges, self.label = ranges, label
        self._by_name = {m.name: m for m in entries}

    def exists(self, relpath: str) -> bool:
        return relpath in self._by_name

    def read_text(self, relpath: str) -> str:
        return _zipdir.read_member(self.ranges, self._by_name[relpath]).decode("utf-8", "replace")

    def open_binary(self, relpath: str) -> AbstractContextManager[io.BytesIO]:
        raise WheelElfError(f"{relpath!r}: whole members of a remote wheel are not read")


def predict(read: _zipdir.Reader, size: int, tail: bytes, label: str, *,
            max_inflated: int = MAX_INFLATED) -> Prediction:
    """The predicted consumer fingerprint of the wheel read by `read` (tail: its last bytes).

    Objects whose tables lie beyond `max_inflated` are listed in `Prediction.unread`; the
    fingerprint then stands on the others only.
    """
    counted = _Counted(read)
    try:
        ranges, entries = _zipdir.open_directory(counted, size, tail)
        dist = _distribution(ranges, entries, label)
        evidence, objects = _evidence(ranges, entries, max_inflated)
    except _zipdir.ZipDirectoryError as exc:
        raise WheelElfError(f"{label!r}: {exc}") from exc
    if dist.key == "torch":
        raise WheelElfError(f"{label!r} is torch itself, not a consumer")
    fingerprint = consumer_fingerprint(dist, evidence)
    return Prediction(fingerprint, size, counted.fetched + len(tail), objects,
                      evidence.minimum_torch())


def predict_file(path: Path, *, max_inflated: int = MAX_INFLATED) -> Prediction:
    """`predict` over a wheel on disk (tests and benchmarks compare it with the fingerprint)."""
    with open(path, "rb") as handle:

        def read(offset: int, length: int) -> bytes:
            handle.seek(offset)
            return handle.read(length)

        size = path.stat().st_size
        tail = read(max(0, size - _zipdir.TAIL), _zipdir.TAIL)
        return predict(read, size, tail, str(path), max_inflated=max_inflated)


def _distribution(ranges: _zipdir._Ranges, entries: list[_zipdir.Member],
                  label: str) -> Distribution:
    files = _RemoteFiles(ranges, entries, label)
    names = tuple(m.name for m in entries)
    metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(metadata) != 1:
        raise WheelElfError(f"{label!r} has no single .dist-info/METADATA")
    headers = parse_headers(files.read_text(metadata[0]))
    name, version = headers.get("name"), headers.get("version")
    if not name or not version:
        raise WheelElfError(f"{metadata[0]!r} in {label!r} has no Name or Version")
    log.debug("%s: %s %s", label, normalize_name(name[0]), version[0])
    return Distribution(name[0], version[0], tuple(headers.get("requires-dist", ())), files,
                        lambda: names)


def _evidence(ranges: _zipdir._Ranges, entries: list[_zipdir.Member],
              max_inflated: int) -> tuple[linkclass.LinkEvidence, list[ObjectRead]]:
    evidence = linkclass.LinkEvidence()
    objects = []
    for member in entries:
        if not linkclass.is_shared_object(member.name):
            continue
        if linkclass.is_bundled(member.name):
            evidence.add_bundled(member.name)
            continue
        prefix = MemberPrefix(ranges, member, max_inflated)
        try:
            symbols, how = object_symbols(prefix)
        except BeyondBound as exc:
            log.debug("%s", exc)
            objects.append(ObjectRead(member.name, "beyond", len(prefix.data), member.uncompressed))
            continue
        evidence.add(symbols)
        objects.append(ObjectRead(member.name, how, len(prefix.data), member.uncompressed))
    return evidence, objects
