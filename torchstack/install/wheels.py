"""The command that installs a set of wheels into a prefix, fast.

pip unpacks and byte-compiles one wheel at a time on one core; for torch that is 12,000
files and most of the install time. uv unpacks and byte-compiles in parallel and writes the
same pip-compatible metadata (RECORD, INSTALLER), so `pip check` and `pip list` work.

uv unpacks into its cache and then links or copies into the prefix. A cache on the prefix's
own file system lets it hard-link, so 700 MB of torch is written once, not twice; the cache
is removed after the install and the hard links keep the files. Unlinking its 12,000 entries
is slow (bench/README.rst), so the cache is renamed out of the prefix at once and deleted by a
thread while the installation is checked (`start_removal`). uv does not byte-compile either:
the easyblock does that afterwards (`compile_command`), beside the post-processing, the sanity
check and the module step, instead of making them wait.

A site that installs one release many times (toolchains, suffixes, CUDA variants) can keep one
cache for all of them instead: $TORCHSTACK_UV_CACHE, on the installpath's file system. An
install then hard-links what the cache already holds and writes almost nothing; installs share
their files' inodes with the cache and with each other, so nothing may change an installed file
in place (torchstack's own rewrites write new files, install/runpath.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from collections.abc import Sequence

from torchstack._files import open_regular
from torchstack.errors import TorchstackError
from torchstack.install import bytecode


class InstallerError(TorchstackError):
    """No usable wheel installer."""


def uv_binary() -> str:
    """The uv executable that came with torchstack (the `uv` package), or the one on PATH."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise InstallerError("uv is not installed: pip install uv") from None
        return found


CACHE_DIR = ".torchstack-uv-cache"
SHARED_CACHE_ENV = "TORCHSTACK_UV_CACHE"


def shared_cache() -> str:
    """The cache kept across installs ($TORCHSTACK_UV_CACHE, absolute), or "" for none."""
    found = os.environ.get(SHARED_CACHE_ENV, "")
    return os.path.abspath(found) if found else ""


def cache_dir(prefix: str) -> str:
    """uv's cache for this install: the shared one, else one inside the prefix, so that hard
    links work, removed after the install."""
    return shared_cache() or os.path.join(prefix, CACHE_DIR)


def leftovers(prefix: str) -> list[str]:
    """What an install leaves in the prefix besides the packages: uv's lock, and its own cache
    unless the shared one is used."""
    own = [] if shared_cache() else [os.path.join(prefix, CACHE_DIR)]
    return [os.path.join(prefix, ".lock"), *own]


def start_removal(prefix: str) -> threading.Thread:
    """Take the `leftovers` out of `prefix` now and delete them in a thread; join it to wait.

    The install's own cache is renamed beside the prefix (same file system, so the rename is
    instant), out of reach of anything that walks the installation; where the rename fails it
    is deleted here. The thread is not a daemon: the process does not end before the cache is
    gone. A shared cache stays.
    """
    lock, *own = leftovers(prefix)
    if os.path.lexists(lock):
        os.remove(lock)
    doomed = _move_aside(own[0], f"{prefix.rstrip(os.sep)}{CACHE_DIR}-{os.getpid()}") if own else ""
    thread = threading.Thread(target=_remove_tree, args=(doomed,), name="torchstack-uv-cache")
    thread.start()
    return thread


def _move_aside(cache: str, doomed: str) -> str:
    """Rename `cache` to `doomed` and return that; "" where it is gone or already deleted."""
    try:
        os.rename(cache, doomed)
    except FileNotFoundError:
        return ""
    except OSError:
        shutil.rmtree(cache)
        return ""
    return doomed


def _remove_tree(path: str) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def install_command(python: str, prefix: str, wheels: Sequence[str]) -> list[str]:
    """Install `wheels` for `python` under `prefix`, without dependencies or network and
    without byte-compiling: the caller runs `compile_command` afterwards. With a shared cache
    the wheels are named by content (`by_content`)."""
    if not wheels:
        raise InstallerError("no wheels to install")
    shared = shared_cache()
    return [
        uv_binary(), "pip", "install",
        "--python", python,
        "--prefix", prefix,
        "--no-deps", "--offline", "--no-config",
        "--cache-dir", cache_dir(prefix),
        "--link-mode", "hardlink",
        *(by_content(w, shared) if shared else os.path.abspath(w) for w in wheels),
    ]


WHEELS_BY_CONTENT = "torchstack-wheels"


def by_content(wheel: str, cache: str) -> str:
    """A hard link to `wheel` in `cache`, named by its sha256, made once; the wheel's real path
    where no link can be made (another file system).

    uv keys a local wheel by its path and mtime: the same wheel fetched into another build's
    sources would be unpacked into the cache again, 700 MB for torch, each time. Under one
    name per content, every install of it finds the first unpacking."""
    real = os.path.realpath(wheel)
    sha256 = hashlib.sha256()
    with open_regular(real, InstallerError) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha256.update(chunk)
    digest = sha256.hexdigest()
    folder = os.path.join(cache, WHEELS_BY_CONTENT, digest)
    named = os.path.join(folder, os.path.basename(real))
    if os.path.exists(named):
        return named
    staging = f"{named}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, exist_ok=True)
        os.link(real, staging)
        os.replace(staging, named)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(staging)
        return real
    return named


def compile_command(python: str, site_packages: str, jobs: int = 0) -> list[str]:
    """Byte-compile every Python file under `site_packages` with `jobs` processes (0: one per
    core), as an installer would (timestamp-based .pyc files, or checked hashes under
    SOURCE_DATE_EPOCH); files that do not compile are reported and skipped (exit code 1), as
    pip and uv skip them. `python` runs torchstack.install.bytecode, compileall's output with
    less overhead."""
    return [python, bytecode.__file__, "-j", str(jobs), site_packages]
