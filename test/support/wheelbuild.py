"""Build small, valid wheels with zipfile (PEP 427: WHEEL, METADATA, RECORD)."""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import struct
import time
import zipfile
import zlib
from pathlib import Path

# A file changed this recently is hashed each time: a rewrite within one tick of the file
# system's clock could leave its times as they were (git's "racy clean" case).
SETTLED_NS = 1_000_000_000


def sha256(path: Path) -> str:
    """Hex sha256 of a file, read a megabyte at a time; once per worker for the same file
    unchanged since (the CUDA 13 stack's 3 GB of wheels are staged for several installs)."""
    status = os.stat(path)
    if time.time_ns() - status.st_ctime_ns < SETTLED_NS:
        return _digest(path)
    return _remembered(os.path.realpath(path), status.st_dev, status.st_ino, status.st_size,
                       status.st_mtime_ns, status.st_ctime_ns)


@functools.cache
def _remembered(real: str, *identity: int) -> str:
    # `identity`: the file's device, inode, size, mtime and ctime; any change is a new key
    return _digest(real)


def _digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(
    dest: Path, name: str, version: str, files: dict[str, bytes],
    requires: tuple[str, ...] = (), tag: str = "py3-none-any",
) -> Path:
    """Write {name}-{version}-{tag}.whl with `files` and a complete dist-info."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
         *(f"Requires-Dist: {r}" for r in requires)]
    ) + "\n"
    wheel = f"Wheel-Version: 1.0\nGenerator: torchstack-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = metadata.encode()
    members[f"{dist_info}/WHEEL"] = wheel.encode()
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in members.items())
    record += f"{dist_info}/RECORD,,\n"
    members[f"{dist_info}/RECORD"] = record.encode()
    path = dest / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return path


def build_sparse_wheel(dest: Path, filename: str, size: int, metadata: str,
                       members: int = 0) -> Path:
    """A wheel of exactly `size` bytes that costs no disk: a stored member of zeros left as a
    hole in a sparse file, `members` empty files (a real torch wheel's zip directory lists
    about 10,000), the dist-info METADATA, then the zip directory.

    Only the zip directory and METADATA of such a wheel can be read meaningfully, which is all
    an index client that reads metadata by range requests may touch.
    """
    name, version = filename.split("-")[:2]
    meta_data = metadata.encode()
    path = dest / filename
    entries = [(f"{name}/_members/{i:06d}.py".encode(), b"") for i in range(members)]
    entries.append((f"{name}-{version}.dist-info/METADATA".encode(), meta_data))
    used = sum(30 + 46 + 2 * len(n) + len(d) for n, d in entries)
    pad = size - used - (30 + 46 + 2 * len(b"padding")) - 22
    if pad < 0:
        raise ValueError(f"{size} bytes is too small for {filename!r}")
    crcs = [_zero_crc(pad)] + [zlib.crc32(d) for _, d in entries]
    names = [b"padding"] + [n for n, _ in entries]
    lengths = [pad] + [len(d) for _, d in entries]
    with open(path, "wb") as out:
        offsets = []
        for index, (member, length, crc) in enumerate(zip(names, lengths, crcs)):
            offsets.append(out.tell())
            out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, length,
                                  length, len(member), 0) + member)
            if index == 0:
                out.seek(length, 1)  # the hole
            else:
                out.write(entries[index - 1][1])
        start = out.tell()
        for member, length, crc, offset in zip(names, lengths, crcs, offsets):
            out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc,
                                  length, length, len(member), 0, 0, 0, 0, 0, offset) + member)
        end = out.tell()
        count = len(names)
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, end - start, start, 0))
    assert path.stat().st_size == size
    return path


def _zero_crc(length: int) -> int:
    """CRC-32 of `length` zero bytes, a block at a time (no memory for the whole)."""
    crc, block = 0, bytes(1 << 20)
    while length:
        step = min(length, len(block))
        crc = zlib.crc32(block[:step], crc)
        length -= step
    return crc
