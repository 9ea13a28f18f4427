"""Write a set of generated files into a folder all at once, or not at all.

The set is written into a fresh sibling folder first (same file system), together with
what the target folder already holds; then the folders trade places. A generator killed at
any point leaves the target folder with either its old content or the complete new set,
and at worst a `.<name>.tmp-*` sibling to delete. Existing files are replaced only when
forced.

What a site expects of the folder survives the swap:

- a symlink given as the folder stays a symlink: the swap happens at its target;
- the new folder gets the old one's mode (setgid and sticky bits included), group, extended
  attributes (ACLs) and, where the writer may set it (root), owner; a folder that did not
  exist is made as `mkdir` makes it (umask, the parent's setgid group). Files are written
  into it as into the old folder: in a setgid folder they get the folder's group;
- a folder whose swap would pull the ground from under someone is refused: `/`, the home
  folder and its ancestors, the current folder and its ancestors, mount points, and a
  folder with a mount point inside;
- writers lock each other out with `flock` on `.<name>.lock` beside the folder, held from
  the check for existing files to the end of the swap; a second writer waits up to
  `LOCK_WAIT` seconds, then fails naming the folder.

Errors name the folder as the caller gave it, never the staging folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)

LOCK_WAIT = 10.0
"""Seconds a writer waits for another one writing the same folder."""

_STAGING = re.compile(r"^\.(.+)\.tmp-[0-9a-f]{8}$")


class OutputError(TorchstackError):
    """An output folder that cannot take the generated set."""


def staging_path(path: Path) -> Path:
    """A fresh name beside `path` for what will be renamed over it: `.<name>.tmp-<8 hex>`,
    the one form of torchstack's staging files, which readers of module trees and rc-file
    folders skip or clean up (`staged_name`)."""
    return path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")


def staged_name(name: str) -> str | None:
    """The name whose staging file `name` is (see `staging_path`); None for any other name."""
    found = _STAGING.match(name)
    return found.group(1) if found else None


def write_set(folder: Path, files: Mapping[str, str], force: bool = False,
              lock_wait: float = LOCK_WAIT) -> list[str]:
    """Write `files` (name -> text) into `folder`; returns the names that replaced old files."""
    for name in files:
        if not name or "/" in name or name.startswith("."):
            raise OutputError(f"{name!r} is not a plain file name")
    shown = str(folder)
    target: Path | None = None
    try:
        target = _target(folder, shown)
        with _locked(target, shown, lock_wait):
            return _write_locked(target, shown, files, force)
    except OSError as exc:
        raise OutputError(_describe(exc, shown, target)) from exc


def _target(folder: Path, shown: str) -> Path:
    """The real folder to swap: symlinks followed, missing parents made, unsafe ones refused."""
    if os.path.islink(folder) and not os.path.exists(folder):
        real = os.path.realpath(folder)
        if _is_loop(real):
            raise OutputError(f"output folder {shown!r}: symlink loop")
        raise OutputError(f"output folder {shown!r} is a symlink to {real!r}, which does "
                          f"not exist")
    target = Path(os.path.realpath(folder))
    if _is_loop(str(target)):
        raise OutputError(f"output folder {shown!r}: symlink loop")
    what = _unsafe(target)
    if what:
        raise OutputError(f"output folder {shown!r} is {what}: the output folder is replaced "
                          f"as a whole, so give it a folder of its own, e.g. "
                          f"{os.path.join(shown, 'easyconfigs')!r}")
    # Through the caller's path, not the resolved one: a dangling symlink among the parents
    # fails here instead of having its target made.
    folder.absolute().parent.mkdir(parents=True, exist_ok=True)
    return Path(os.path.realpath(folder))


def _is_loop(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _unsafe(target: Path) -> str | None:
    """Why swapping `target` would harm its surroundings, or None."""
    if target == target.parent:
        return "the root folder"
    try:
        cwd: Path | None = Path(os.getcwd())
    except OSError:
        cwd = None
    if cwd is not None and (target == cwd or target in cwd.parents):
        return "the current folder" if target == cwd else "an ancestor of the current folder"
    try:
        home: Path | None = Path(os.path.realpath(Path.home()))
    except (OSError, RuntimeError, KeyError):
        home = None
    if home is not None and (target == home or target in home.parents):
        return "the home folder" if target == home else "an ancestor of the home folder"
    if target.is_dir() and os.path.ismount(target):
        return "a mount point"
    return None


def _write_locked(target: Path, shown: str, files: Mapping[str, str], force: bool) -> list[str]:
    if target.exists() and not target.is_dir():
        raise OutputError(f"output folder {shown!r} exists and is not a folder")
    replaced = sorted(name for name in files if (target / name).exists())
    if replaced and not force:
        raise OutputError(f"output folder {shown!r} already has {', '.join(replaced)}; "
                          f"use --force to replace")
    old = os.stat(target) if target.exists() else None
    staging: Path | None = None
    try:
        try:
            with _deferred_interrupts():
                staging = _make_staging(target)
            _prepare(staging, target, old, shown)
            if old is not None:
                _copy_existing(target, staging, skip=set(files), device=old.st_dev,
                               shown=shown)
            for name, text in files.items():
                (staging / name).write_text(text, encoding="utf-8")
            if old is not None:
                os.chmod(staging, stat.S_IMODE(old.st_mode))
        except BaseException:
            if staging is not None:
                with _deferred_interrupts():
                    shutil.rmtree(staging, ignore_errors=True)
            raise
        with _deferred_interrupts():
            try:
                _swap(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise OutputError(_describe(exc, shown, target, staging)) from exc
    return replaced


def _make_staging(target: Path) -> Path:
    """A new sibling of `target`; made as `mkdir` makes a folder when `target` is new."""
    for _ in range(100):
        staging = staging_path(target)
        try:
            os.mkdir(staging, 0o777 if not target.exists() else 0o700)
            return staging
        except FileExistsError:
            continue
        except OSError as exc:  # what fails is making a folder in the parent: name that
            raise OSError(exc.errno, exc.strerror, str(target.parent)) from exc
    raise FileExistsError(errno.EEXIST, "no free staging name", str(target.parent))


def _prepare(staging: Path, target: Path, old: os.stat_result | None, shown: str) -> None:
    """Owner, group, mode and extended attributes of the old folder, before any file goes in
    (a setgid folder gives new files its group); the mode keeps the owner's write access
    until the set is in."""
    if old is None:
        return
    made = os.stat(staging)
    uid = old.st_uid if os.geteuid() == 0 else -1
    if old.st_gid != made.st_gid or (uid != -1 and uid != made.st_uid):
        try:
            os.chown(staging, uid, old.st_gid)
        except PermissionError as exc:
            raise OutputError(f"output folder {shown!r}: the new set cannot keep the "
                              f"folder's group ({old.st_gid}): {exc.strerror}") from exc
    os.chmod(staging, stat.S_IMODE(old.st_mode) | stat.S_IRWXU)
    _copy_xattrs(str(target), str(staging))


def _copy_xattrs(src: str, dst: str) -> None:
    """Extended attributes (ACLs among them) as far as the file system and the writer allow."""
    try:
        names = os.listxattr(src, follow_symlinks=False)
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.setxattr(dst, name, os.getxattr(src, name, follow_symlinks=False),
                        follow_symlinks=False)


def _copy_existing(folder: Path, staging: Path, skip: set[str], device: int, shown: str,
                   inside: str = "") -> None:
    """The target folder's content into the staging folder, files as hard links where
    possible; never the files about to be replaced: writing through a hard link would change
    the live folder's file in place. A mount point inside is refused: removing the old
    folder would empty the mounted file system."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name in skip:
                continue
            target = staging / entry.name
            if entry.is_dir(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                if info.st_dev != device:
                    raise OutputError(f"output folder {shown!r} holds a mount point "
                                      f"({inside + entry.name}); the output folder is replaced "
                                      f"as a whole, so it cannot hold one")
                os.mkdir(target, 0o700)
                _copy_existing(Path(entry.path), target, set(), device, shown,
                               f"{inside}{entry.name}/")
                _keep_attributes(entry.path, target, info)
            else:
                _link_or_copy(entry.path, str(target))


def _keep_attributes(src: str, dst: Path, info: os.stat_result) -> None:
    with contextlib.suppress(PermissionError):
        os.chown(dst, info.st_uid if os.geteuid() == 0 else -1, info.st_gid)
    _copy_xattrs(src, str(dst))
    os.chmod(dst, stat.S_IMODE(info.st_mode))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _swap(staging: Path, folder: Path) -> None:
    """Put `staging` in the place of `folder`; the old folder ends up at `staging`."""
    if not folder.exists():
        os.rename(staging, folder)
        return
    if _exchange(staging, folder):
        return
    old = staging.with_name(staging.name + ".old")
    os.rename(folder, old)
    try:
        os.rename(staging, folder)
    except BaseException:
        os.rename(old, folder)
        raise
    os.rename(old, staging)


def _exchange(first: Path, second: Path) -> bool:
    """renameat2(RENAME_EXCHANGE): both names trade places in one step, where Linux has it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second),
                       rename_exchange)
    if result != 0:
        log.debug("renameat2 failed (errno %s); renaming in two steps", ctypes.get_errno())
    return bool(result == 0)


@contextlib.contextmanager
def _locked(target: Path, shown: str, wait: float) -> Iterator[None]:
    """An exclusive flock on `.<name>.lock` beside `target`, removed again when released.
    After the lock is granted the name is checked to still be that file: a writer that
    finished in the meantime removed it, and the next one locks a fresh file."""
    path = target.with_name(f".{target.name}.lock")
    deadline = time.monotonic() + wait
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o666)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OutputError(f"{str(path)!r}, the lock file of output folder {shown!r}, "
                                  f"is not a regular file")
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise OutputError(f"another torchstack generate is writing {shown!r} "
                                      f"(it holds {str(path)!r}); try again when it is done")
                time.sleep(0.05)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        with _deferred_interrupts():
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def _deferred_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done: a swap or a clean-up is never cut
    in half (a Ctrl-C during it is raised when it ends)."""
    signals = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _describe(exc: OSError, shown: str, target: Path | None,
              staging: Path | None = None) -> str:
    """The error in the caller's words: staging and resolved paths as paths in `shown`."""
    reason = exc.strerror or str(exc)
    text = f"{os.fsdecode(exc.filename)}: {reason}" if exc.filename else reason
    for internal in (staging, target):
        if internal is not None:
            text = text.replace(str(internal), shown.rstrip("/") or "/")
    return f"cannot write output folder {shown!r}: {text}"


def replace_file(path: Path, text: str, mode: int | None = None) -> None:
    """Write one file atomically: a temporary sibling, renamed over `path`. Readers see the
    old or the new content, never half of it. The file gets `mode`; without one an existing
    file keeps its mode and a new one gets 0644.

    torchstack's one atomic write of a single file (generated files, recorded fingerprints,
    a venv's files); its staging file is named by `staging_path`."""
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = 0o644
    staging = staging_path(path)
    try:
        with _deferred_interrupts():
            fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(staging, mode)
            with _deferred_interrupts():
                os.replace(staging, path)
        except BaseException:
            with _deferred_interrupts(), contextlib.suppress(OSError):
                os.unlink(staging)
            raise
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(f"cannot write {str(path)!r}: {reason}") from exc
