"""The suite's own file digest (support/wheelbuild.py): remembered per file, never stale."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from support.wheelbuild import sha256


def test_digest_follows_the_content(tmp_path: Path) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"one")
    assert sha256(wheel) == hashlib.sha256(b"one").hexdigest()
    # the same size and modification time, rewritten in place: the ctime tells it apart
    stat = wheel.stat()
    wheel.write_bytes(b"two")
    os.utime(wheel, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sha256(wheel) == hashlib.sha256(b"two").hexdigest()
    # replaced by another file under the same name, and reached through a symlink
    (tmp_path / "b.whl").write_bytes(b"six")
    os.replace(tmp_path / "b.whl", wheel)
    (tmp_path / "link.whl").symlink_to(wheel)
    assert sha256(tmp_path / "link.whl") == hashlib.sha256(b"six").hexdigest()
