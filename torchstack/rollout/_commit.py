"""Write the rc files of a rollout all or nothing, and safely again after a crash.

Two phases under one lock: every new text is first written to a staging file beside its
target (so a read-only folder, a full disk or a missing permission shows before anything is
switched), then each staging file is renamed over its target. When a rename still fails, the
targets already switched get their old text back, and the error names them. A run that was
killed leaves at most staging files (`..modulerc.tmp-*`): the next run removes them first.

An rc file that is a symlink (say to a file the site shares between trees) stays a symlink:
its target is written, in the target's folder, and so every folder that links it changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchstack._files import MAX_CONFIG, read_regular
from torchstack.guards.moduletree import RC_FILES
from torchstack.output import staged_name, staging_path
from torchstack.rollout._rcfiles import RcFileError


@dataclass(frozen=True)
class Change:
    """One rc file's new text; None removes the file (it held nothing but torchstack's)."""

    path: Path
    text: str | None


@dataclass(frozen=True)
class _Staged:
    change: Change
    target: Path  # the file written: `path`, or the regular file a symlink leads to
    old: bytes | None
    mode: int
    staging: Path | None


def commit(changes: Sequence[Change]) -> None:
    """Write every change or none; `RcFileError` names what failed and what was restored.
    The caller holds the lock (`locked`)."""
    staged = _stage_all(changes)
    done: list[_Staged] = []
    try:
        for item in staged:
            _switch(item)
            done.append(item)
    except BaseException as exc:
        _discard(staged)
        failed = staged[len(done)].change.path
        raise RcFileError(_failure(failed, exc, done)) from exc


def clean_staging(folder: Path) -> list[Path]:
    """Remove the staging files a killed run left in `folder` (the caller holds the lock)."""
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(folder):
            if (staged_name(entry.name) in RC_FILES.values()
                    and entry.is_file(follow_symlinks=False)):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """One rollout at a time in an install path: an flock on its modules folder."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise RcFileError(f"cannot open {str(folder)!r}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise RcFileError(f"another `torchstack rollout` is writing the defaults in "
                              f"{str(folder)!r}; run again once it has finished") from exc
        yield
    finally:
        os.close(fd)


def _stage_all(changes: Sequence[Change]) -> list[_Staged]:
    staged: list[_Staged] = []
    seen: dict[Path, Change] = {}
    try:
        for change in changes:
            target = _target(change.path)
            other = seen.get(target)
            if other is not None and other.text != change.text:
                raise RcFileError(f"{str(other.path)!r} and {str(change.path)!r} are one "
                                  f"file ({str(target)!r}) that would need two defaults")
            if other is None:
                seen[target] = change
                staged.append(_stage(change, target))
    except BaseException:
        _discard(staged)
        raise
    return staged


def _target(path: Path) -> Path:
    """The file to replace: `path`, or the file its symlink leads to (checked regular)."""
    if not path.is_symlink():
        return path
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        raise RcFileError(f"{str(path)!r} is a symlink to {str(real)!r}, which cannot be "
                          f"written: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        raise RcFileError(f"{str(path)!r} is a symlink to {str(real)!r}, not a regular file")
    return real


def _stage(change: Change, target: Path) -> _Staged:
    old = _old(target)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode) if old is not None else 0o644
    except OSError:
        mode = 0o644
    if change.text is None:
        return _Staged(change, target, old, mode, None)
    staging = staging_path(target)
    try:
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(change.text)
            os.chmod(staging, mode)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(staging)
            raise
    except OSError as exc:
        raise RcFileError(f"cannot write {str(change.path)!r}: {exc.strerror or exc}; "
                          f"nothing was changed") from exc
    return _Staged(change, target, old, mode, staging)


def _old(target: Path) -> bytes | None:
    if not os.path.lexists(target):
        return None
    try:
        return read_regular(target, RcFileError, limit=MAX_CONFIG)  # as scan reads them
    except OSError as exc:
        raise RcFileError(f"cannot read {str(target)!r}: {exc.strerror or exc}") from exc


def _switch(item: _Staged) -> None:
    if item.staging is not None:
        os.replace(item.staging, item.target)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(item.target)


def _discard(staged: Sequence[_Staged]) -> None:
    for item in staged:
        if item.staging is not None:
            with contextlib.suppress(OSError):
                os.unlink(item.staging)


def _failure(failed: Path, exc: BaseException, done: Sequence[_Staged]) -> str:
    """What failed, and each file switched before it: restored, or still switched."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    message = f"cannot write {str(failed)!r}: {reason or type(exc).__name__}"
    restored, kept = [], []
    for item in reversed(done):
        try:
            _restore(item)
            restored.append(str(item.change.path))
        except OSError as err:
            kept.append(f"{str(item.change.path)!r} ({err.strerror or err})")
    if restored:
        message += f"; restored the files written before it: {', '.join(map(repr, restored))}"
    if kept:
        message += f"; NOT restored, still switched: {', '.join(kept)}"
    if not done:
        message += "; nothing was changed"
    return message


def _restore(item: _Staged) -> None:
    if item.old is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(item.target)
        return
    staging = staging_path(item.target)
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(item.old)
        os.chmod(staging, item.mode)
        os.replace(staging, item.target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise

