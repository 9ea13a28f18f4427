"""One member of a zip file read through ranges: a wheel's METADATA without the whole wheel.

The order of reads follows the zip format (APPNOTE 4.3): the end of central directory record
(and its ZIP64 twin) in the file's tail, the central directory, then the local header and the
compressed data of the one member wanted. Reads that fall inside the tail already fetched cost
nothing; the caller's `read(offset, length)` is asked only for the rest.

What a zip says about sizes is not believed: the central directory is read only up to
MAX_DIRECTORY bytes and the member only up to `limit` bytes, packed and inflated (inflation
stops there, so a member that claims 1 KiB and inflates to 1 GiB costs `limit`).
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from torchstack._files import describe_os_error, open_regular
from torchstack.errors import TorchstackError
from torchstack.index._http import size_text

Reader = Callable[[int, int], bytes]  # (offset, length) -> exactly `length` bytes

_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_MAX_COMMENT = 0xFFFF
_LOCAL_SLACK = 1024
READ_AHEAD = 32 << 10  # the least fetched for a read before the tail
TAIL = _EOCD.size + _MAX_COMMENT + _ZIP64_LOCATOR.size + _ZIP64_EOCD.size
_METADATA = re.compile(r"^([^/]+)\.dist-info/METADATA$")
_UTF8_NAMES = 0x800
MAX_DIRECTORY = 64 << 20  # a torch wheel's central directory is about 2 MB
MAX_METADATA = 8 << 20  # a METADATA file is a few kB; torch's is 3 kB


class ZipDirectoryError(TorchstackError):
    """A file that is not a readable zip, or lacks the member asked for."""


@dataclass(frozen=True)
class Member:
    """A central directory entry: where a member's data lies and how it is packed."""

    name: str
    method: int
    crc: int
    compressed: int
    uncompressed: int
    header_offset: int


class _Ranges:
    """Reads of the file, served from the fetched tail when it covers them, and a small read
    fetched as a READ_AHEAD window: a member's local header, its first packed bytes and the
    next small reads come in one request (on a remote index each costs a round trip)."""

    def __init__(self, read: Reader, size: int, tail: bytes) -> None:
        self.read_range, self.size, self.tail = read, size, tail
        self.tail_start = size - len(tail)
        self._window_start, self._window = 0, b""

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ZipDirectoryError(f"a zip record points outside the file ({offset}+{length} "
                                    f"of {self.size} bytes)")
        if offset >= self.tail_start:
            return self.tail[offset - self.tail_start:offset - self.tail_start + length]
        if offset + length > self.tail_start:  # the part before the tail only
            head = self._head(offset, self.tail_start - offset)
            return head + self.tail[:offset + length - self.tail_start]
        return self._head(offset, length)

    def _head(self, offset: int, length: int) -> bytes:
        """Bytes before the tail: what the window holds, the rest fetched."""
        held = b""
        window_end = self._window_start + len(self._window)
        if self._window_start <= offset < window_end:
            held = self._window[offset - self._window_start:offset - self._window_start + length]
            offset, length = offset + len(held), length - len(held)
        if not length:
            return held
        if length >= READ_AHEAD:
            return held + self.read_range(offset, length)
        ahead = min(READ_AHEAD, self.tail_start - offset)
        self._window_start, self._window = offset, self.read_range(offset, ahead)
        return held + self._window[:length]


def read_dist_info_metadata(read: Reader, size: int, tail: bytes, project: str, *,
                            limit: int = MAX_METADATA,
                            max_directory: int = MAX_DIRECTORY) -> bytes:
    """The uncompressed `*.dist-info/METADATA` of the wheel of `project` (tail: its last bytes),
    at most `limit` bytes of it, from a central directory of at most `max_directory` bytes."""
    ranges, entries = open_directory(read, size, tail, max_directory=max_directory)
    return read_member(ranges, _choose_metadata(entries, project), limit)


def open_directory(read: Reader, size: int, tail: bytes, *,
                   max_directory: int = MAX_DIRECTORY) -> tuple[_Ranges, list[Member]]:
    """The reads of a zip file (tail: its last bytes) and its central directory's entries."""
    ranges = _Ranges(read, size, tail)
    offset, length = central_directory(ranges)
    if length > max_directory:
        raise ZipDirectoryError(f"a central directory of {length} bytes, over the limit of "
                                f"{size_text(max_directory)} for a wheel's zip directory")
    return ranges, list(members(ranges.read(offset, length)))


def packed_start(ranges: _Ranges, member: Member) -> int:
    """Where a member's packed data begins: after its local header, name and extra field."""
    header = ranges.read(member.header_offset, _LOCAL.size)
    fields = _LOCAL.unpack(header)
    if fields[0] != b"PK\x03\x04":
        raise ZipDirectoryError(f"no local header of {member.name!r} at {member.header_offset}")
    name_length: int = fields[10]
    extra_length: int = fields[11]
    return member.header_offset + _LOCAL.size + name_length + extra_length


def file_dist_info_metadata(path: Path, project: str, *, limit: int = MAX_METADATA) -> bytes:
    """The uncompressed `*.dist-info/METADATA` of a wheel on disk (at most `limit` bytes)."""
    with local_ranges(path) as (read, size, tail):
        return read_dist_info_metadata(read, size, tail, project, limit=limit)


@contextmanager
def local_ranges(path: Path, error: type[TorchstackError] = ZipDirectoryError
                 ) -> Iterator[tuple[Reader, int, bytes]]:
    """Range reads of a file on disk, as an index gives them: the reader, the size and the
    tail. Only a regular file is opened; a FIFO or a missing file is `error`, naming it."""
    try:
        handle = open_regular(path, error)
    except OSError as exc:
        raise error(describe_os_error(str(path), exc)) from exc
    with handle:

        def read(offset: int, length: int) -> bytes:
            handle.seek(offset)
            return handle.read(length)

        size = os.fstat(handle.fileno()).st_size
        yield read, size, read(max(0, size - TAIL), TAIL)


def central_directory(ranges: _Ranges) -> tuple[int, int]:
    """Offset and size of the central directory, from the (ZIP64) end record in the tail."""
    position = ranges.tail.rfind(b"PK\x05\x06")
    if position < 0 or len(ranges.tail) - position < _EOCD.size:
        raise ZipDirectoryError("no end of central directory record: not a zip file")
    fields = _EOCD.unpack_from(ranges.tail, position)
    count, length, offset = fields[4], fields[5], fields[6]
    if count == 0xFFFF or 0xFFFFFFFF in (length, offset):
        return _zip64_directory(ranges, ranges.tail_start + position)
    return offset, length


def _zip64_directory(ranges: _Ranges, eocd_offset: int) -> tuple[int, int]:
    locator = ranges.read(eocd_offset - _ZIP64_LOCATOR.size, _ZIP64_LOCATOR.size)
    signature, _, record_offset, _ = _ZIP64_LOCATOR.unpack(locator)
    if signature != b"PK\x06\x07":
        raise ZipDirectoryError("a ZIP64 size without a ZIP64 end of central directory locator")
    record = _ZIP64_EOCD.unpack(ranges.read(record_offset, _ZIP64_EOCD.size))
    if record[0] != b"PK\x06\x06":
        raise ZipDirectoryError(f"no ZIP64 end of central directory record at {record_offset}")
    return record[9], record[8]


def members(directory: bytes) -> Iterator[Member]:
    """The entries of a central directory, in order."""
    position = 0
    while position + _CENTRAL.size <= len(directory):
        fields = _CENTRAL.unpack_from(directory, position)
        if fields[0] != b"PK\x01\x02":
            raise ZipDirectoryError(f"a broken central directory entry at byte {position}")
        name_length, extra_length, comment_length = fields[12], fields[13], fields[14]
        start = position + _CENTRAL.size
        raw_name = directory[start:start + name_length]
        extra = directory[start + name_length:start + name_length + extra_length]
        name = raw_name.decode("utf-8" if fields[5] & _UTF8_NAMES else "cp437", "replace")
        compressed, uncompressed, offset = _zip64_sizes(fields[10], fields[11], fields[18], extra)
        yield Member(name, fields[6], fields[9], compressed, uncompressed, offset)
        position = start + name_length + extra_length + comment_length


def _zip64_sizes(compressed: int, uncompressed: int, offset: int,
                 extra: bytes) -> tuple[int, int, int]:
    """Sizes and offset, the saturated ones taken from the ZIP64 extra field (id 1)."""
    values = iter(_extra_field(extra, 1))
    try:
        uncompressed = next(values) if uncompressed == 0xFFFFFFFF else uncompressed
        compressed = next(values) if compressed == 0xFFFFFFFF else compressed
        offset = next(values) if offset == 0xFFFFFFFF else offset
    except StopIteration:
        raise ZipDirectoryError("a saturated size without its ZIP64 extra field") from None
    return compressed, uncompressed, offset


def _extra_field(extra: bytes, wanted: int) -> list[int]:
    position = 0
    while position + 4 <= len(extra):
        field_id, length = struct.unpack_from("<2H", extra, position)
        if field_id == wanted:
            data = extra[position + 4:position + 4 + length]
            return list(struct.unpack_from(f"<{len(data) // 8}Q", data))
        position += 4 + length
    return []


def _choose_metadata(entries: list[Member], project: str) -> Member:
    """The METADATA of a top-level dist-info; the project's own when there are several."""
    found = [m for m in entries if _METADATA.match(m.name)]
    if len(found) > 1:
        wanted = canonicalize_name(project)
        found = [m for m in found if canonicalize_name(m.name.split("-")[0]) == wanted]
    if len(found) != 1:
        raise ZipDirectoryError(f"{len(found)} *.dist-info/METADATA members of {project!r} "
                                "in the central directory, one expected")
    return found[0]


def read_member(ranges: _Ranges, member: Member, limit: int = MAX_METADATA) -> bytes:
    """A member's uncompressed data, checked against its size and CRC-32; ZipDirectoryError
    when it says or turns out to be over `limit` bytes."""
    if max(member.uncompressed, member.compressed) > limit:
        raise ZipDirectoryError(f"{member.name!r} is {max(member.uncompressed, member.compressed)}"
                                f" bytes, over the limit of {size_text(limit)} for a METADATA "
                                "file (max_metadata)")
    # one read for header and data, with room for the local name and extra field
    guess = min(_LOCAL.size + _LOCAL_SLACK + member.compressed, ranges.size - member.header_offset)
    block = ranges.read(member.header_offset, guess)
    fields = _LOCAL.unpack_from(block) if len(block) >= _LOCAL.size else (b"",)
    if fields[0] != b"PK\x03\x04":
        raise ZipDirectoryError(f"no local header of {member.name!r} at {member.header_offset}")
    start = _LOCAL.size + fields[10] + fields[11]
    packed = block[start:start + member.compressed]
    if len(packed) < member.compressed:
        packed = ranges.read(member.header_offset + start, member.compressed)
    data = _inflate(member, packed, limit)
    if len(data) != member.uncompressed or zlib.crc32(data) != member.crc:
        raise ZipDirectoryError(f"{member.name!r} fails its size or CRC-32 check")
    return data


def _inflate(member: Member, data: bytes, limit: int) -> bytes:
    if member.method == 0:
        return data
    if member.method != 8:
        raise ZipDirectoryError(f"{member.name!r} uses compression method {member.method}, "
                                "not stored (0) or deflate (8)")
    try:
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        inflated = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ZipDirectoryError(f"{member.name!r} does not inflate: {exc}") from exc
    if len(inflated) > limit:
        raise ZipDirectoryError(f"{member.name!r} inflates to more than the limit of "
                                f"{size_text(limit)} for a METADATA file (max_metadata; its "
                                "sizes in the zip are false)")
    return inflated


class Counted:
    """A range reader that counts the bytes it fetched (`already`: bytes read before it)."""

    def __init__(self, read: Reader, already: int = 0) -> None:
        self._read, self.fetched = read, already

    def __call__(self, offset: int, length: int) -> bytes:
        data = self._read(offset, length)
        self.fetched += len(data)
        return data
