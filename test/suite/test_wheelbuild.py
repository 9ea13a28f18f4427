"""The suite's own file digest (support/wheelbuild.py): remembered per file, never stale."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from support import wheelbuild
from support.wheelbuild import sha256

TICK = 0.03  # seconds: more than the file system clock's tick, the settling time below


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files read for a digest, in order; files settle after 20 ms."""
    seen: list[str] = []
    digest = wheelbuild._digest

    def counting(path: str | Path) -> str:
        seen.append(str(path))
        return digest(path)

    monkeypatch.setattr(wheelbuild, "_digest", counting)
    monkeypatch.setattr(wheelbuild, "SETTLED_NS", 20_000_000)
    wheelbuild._remembered.cache_clear()
    return seen


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    time.sleep(TICK)  # settled


def test_settled_file_read_once(tmp_path: Path, read: list[str]) -> None:
    wheel = tmp_path / "a.whl"
    _write(wheel, b"one")
    assert sha256(wheel) == sha256(wheel) == hashlib.sha256(b"one").hexdigest()
    assert read == [str(wheel)]


def test_fresh_file_read_each_time(tmp_path: Path, read: list[str]) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"one")
    assert sha256(wheel) == sha256(wheel) == hashlib.sha256(b"one").hexdigest()
    assert len(read) == 2


def test_digest_follows_the_content(tmp_path: Path, read: list[str]) -> None:
    wheel = tmp_path / "a.whl"
    _write(wheel, b"one")
    assert sha256(wheel) == hashlib.sha256(b"one").hexdigest()
    # the same size and modification time, rewritten in place: the ctime tells it apart
    stat = wheel.stat()
    wheel.write_bytes(b"two")
    os.utime(wheel, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    time.sleep(TICK)
    assert sha256(wheel) == hashlib.sha256(b"two").hexdigest()
    # replaced by another file under the same name, and reached through a symlink
    _write(tmp_path / "b.whl", b"six")
    os.replace(tmp_path / "b.whl", wheel)
    (tmp_path / "link.whl").symlink_to(wheel)
    time.sleep(TICK)
    assert sha256(tmp_path / "link.whl") == hashlib.sha256(b"six").hexdigest()
