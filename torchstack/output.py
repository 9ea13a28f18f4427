"""Write a set of generated files into a folder all at once, or not at all.

The set is written into a fresh sibling folder first (same file system), together with
what the target folder already holds; then the folders trade places. A generator killed at
any point leaves the target folder with either its old content or the complete new set,
and at worst a `.<name>.tmp-*` sibling to delete. Existing files are replaced only when
forced.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)


class OutputError(TorchstackError):
    """An output folder that cannot take the generated set."""


def write_set(folder: Path, files: Mapping[str, str], force: bool = False) -> list[str]:
    """Write `files` (name -> text) into `folder`; returns the names that replaced old files."""
    for name in files:
        if not name or "/" in name or name.startswith("."):
            raise OutputError(f"{name!r} is not a plain file name")
    folder = folder.absolute()
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{str(folder)!r} exists and is not a folder")
    replaced = sorted(name for name in files if (folder / name).exists())
    if replaced and not force:
        raise OutputError(f"{str(folder)!r} already has {', '.join(replaced)}; "
                          f"use --force to replace")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        if folder.is_dir():
            _copy_existing(folder, staging, skip=set(files))
        for name, text in files.items():
            (staging / name).write_text(text)
        _swap(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return replaced


def _copy_existing(folder: Path, staging: Path, skip: set[str]) -> None:
    """The target folder's content into the staging folder, as hard links where possible;
    never the files about to be replaced: writing through a hard link would change the live
    folder's file in place."""
    for entry in folder.iterdir():
        if entry.name in skip:
            continue
        target = staging / entry.name
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target))


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
    os.rename(staging, folder)
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
