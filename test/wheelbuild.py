"""Build small, valid wheels with zipfile (PEP 427: WHEEL, METADATA, RECORD)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


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
