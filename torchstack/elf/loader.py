"""Where glibc's ld.so finds each DT_NEEDED library of a shared object, without loading it.

ld.so(8) looks up each DT_NEEDED name in this order; each step is its own function here:

1. a library the process has already loaded under that name (`preloaded`, soname -> path);
2. a name with a slash is a path, opened as it is once $ORIGIN and friends are expanded;
3. DT_RPATH of the object, only when it has no DT_RUNPATH (`rpath_dirs`);
4. LD_LIBRARY_PATH, passed in by the caller (`split_search_path`), never read from os.environ;
5. DT_RUNPATH of the object (`runpath_dirs`);
6. the system: the folders of /etc/ld.so.conf, which ldconfig caches, then the trusted
   folders /lib, /usr/lib, their lib64 and multiarch variants (`default_system_dirs`).

A candidate file counts only if it is an ELF file of the object's class, byte order and machine
(`ElfKind`): ld.so skips the others, 32-bit libraries for example, and searches on.

Left out on purpose: the DT_RPATH of the objects that load this one (glibc searches those too,
but an installation must not depend on which library happens to load another first), the
ld.so.cache file itself (built by ldconfig from the same folders, possibly stale), the
glibc-hwcaps and tls/platform subfolders of each folder, DF_1_NODEFLIB and the restrictions of
secure (setuid) execution.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import platform
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from torchstack._files import MAX_CONFIG, FileKindError, open_regular, read_text
from torchstack.elf import reader, symbols
from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)

Step = Literal["preloaded", "path", "rpath", "ld_library_path", "runpath", "system", "unresolved"]

# e_machine -> (AT_PLATFORM, the Debian multiarch triplet, glibc's ld.so)
_MACHINES = {
    "EM_X86_64": ("x86_64", "x86_64-linux-gnu", "/lib64/ld-linux-x86-64.so.2"),
    "EM_386": ("i686", "i386-linux-gnu", "/lib/ld-linux.so.2"),
    "EM_AARCH64": ("aarch64", "aarch64-linux-gnu", "/lib/ld-linux-aarch64.so.1"),
    "EM_PPC64": ("ppc64le", "powerpc64le-linux-gnu", "/lib64/ld64.so.2"),
}
# Libraries of the NVIDIA driver: on the compute nodes, never in an installation or a module.
DRIVER_LIBRARY = re.compile(r"^lib(?:cuda|nvidia-[\w-]+|nvcuvid|nvidia-ml)\.so(?:\.\d+)*$")
# $ORIGIN, ${ORIGIN}, ...; an unbraced token must end the entry or be followed by a slash.
_TOKEN = re.compile(r"\$(?:\{(ORIGIN|LIB|PLATFORM)\}|(ORIGIN|LIB|PLATFORM)(?=/|$))")


class LoaderError(TorchstackError):
    """A shared object whose libraries cannot be looked up, because it cannot be read."""


@dataclass(frozen=True)
class ElfKind:
    """What ld.so compares before it accepts a candidate library for an object."""

    elfclass: int  # 32 or 64
    little_endian: bool
    machine: str  # e_machine as pyelftools names it, e.g. "EM_X86_64"


@dataclass(frozen=True)
class SharedObject:
    """A shared object as ld.so sees it: the path it is loaded by, its kind, its dynamic section."""

    path: str
    kind: ElfKind
    dynamic: reader.DynamicInfo


@dataclass(frozen=True)
class Resolution:
    """Where one DT_NEEDED entry resolves (`path`, None when nowhere) and by which step."""

    needed: str
    path: str | None
    step: Step


# -- reading objects and candidates -------------------------------------------------------


def elf_kind(stream: reader.Stream, name: str) -> ElfKind:
    """Class, byte order and machine from the ELF header of `stream`."""
    header = reader.open_elf(stream, name)
    return ElfKind(header.elfclass, header.little_endian, str(header["e_machine"]))


def read_object(path: str | os.PathLike[str]) -> SharedObject:
    """Read the kind and dynamic section of the shared object loaded by `path`."""
    name = os.fspath(path)
    try:
        with reader.map_file(name) as stream:
            kind = elf_kind(stream, name)
            dynamic = reader.read_dynamic(stream, name)
    except OSError as exc:
        raise LoaderError(f"cannot read {name!r}: {exc.strerror or exc}") from exc
    return SharedObject(os.path.abspath(name), kind, dynamic)


def is_candidate(path: str, kind: ElfKind) -> bool:
    """Whether ld.so would take `path` for an object of `kind`: an ELF file of that kind."""
    if not os.path.isfile(path):
        return False
    try:
        with reader.map_file(path) as stream:
            found = elf_kind(stream, path)
    except (OSError, reader.ElfError) as exc:
        log.debug("skipping %s: %s", path, exc)
        return False
    if found != kind:
        log.debug("skipping %s: %s, wanted %s", path, found, kind)
        return False
    return True


def find_in_dirs(needed: str, dirs: Iterable[str], kind: ElfKind) -> str | None:
    """The first `dir/needed` that is a candidate for an object of `kind`."""
    for directory in dirs:
        candidate = os.path.join(directory, needed)
        if is_candidate(candidate, kind):
            return candidate
    return None


# -- dynamic string tokens and the object's own search paths ------------------------------


def token_values(obj: SharedObject, root: str = "/") -> dict[str, str | None]:
    """$ORIGIN, $LIB and $PLATFORM as ld.so expands them for `obj`.

    $ORIGIN is the folder of the path the object is loaded by, symlinks not resolved: glibc
    resolves them only for the executable (through /proc/self/exe), never for libraries.
    $LIB is what glibc was configured with: lib/<triplet> on multiarch systems (Debian,
    Ubuntu: `root`/usr/lib/<triplet> exists), else lib64 for 64-bit and lib for 32-bit objects.
    $PLATFORM is the machine name, or the CPU name glibc before 2.37 puts in its place on this
    host (`haswell`, `xeon_phi`); None for a machine not known here, which drops the entry.
    """
    machine, triplet, ld_so = _MACHINES.get(obj.kind.machine, (None, None, None))
    if machine and ld_so and root == "/":
        machine = _glibc_platform(ld_so) or machine
    if triplet and os.path.isdir(os.path.join(root, "usr/lib", triplet)):
        lib = f"lib/{triplet}"
    else:
        lib = "lib64" if obj.kind.elfclass == 64 else "lib"
    return {"ORIGIN": os.path.dirname(obj.path), "LIB": lib, "PLATFORM": machine}


@functools.cache
def _glibc_platform(ld_so: str) -> str | None:
    """$PLATFORM as this host's ld.so expands it; None where that ld.so cannot say."""
    try:
        out = subprocess.run(
            [ld_so, "--list-diagnostics"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None  # not this machine's loader, or glibc older than 2.33
    found = re.search(r'^dl_platform="([^"]+)"$', out, re.MULTILINE)
    return found.group(1) if found else None


def expand_tokens(entry: str, values: Mapping[str, str | None]) -> str | None:
    """`entry` with $ORIGIN/${ORIGIN}, $LIB and $PLATFORM replaced; None if a value is unknown.

    ld.so drops a search path entry whose token it cannot expand; `$ORIGINAL` or `$HOME` are
    not tokens and stay as they are.
    """
    unknown = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unknown
        value = values.get(match.group(1) or match.group(2))
        unknown = unknown or value is None
        return value or ""

    expanded = _TOKEN.sub(replace, entry)
    return None if unknown else expanded


def _expand_all(entries: Iterable[str], obj: SharedObject) -> tuple[str, ...]:
    values = token_values(obj)
    expanded = (expand_tokens(entry, values) for entry in entries)
    return tuple(entry for entry in expanded if entry)


def rpath_dirs(obj: SharedObject) -> tuple[str, ...]:
    """DT_RPATH folders, expanded; none when the object also has DT_RUNPATH, which overrides it."""
    return () if obj.dynamic.runpath else _expand_all(obj.dynamic.rpath, obj)


def runpath_dirs(obj: SharedObject) -> tuple[str, ...]:
    """DT_RUNPATH folders, expanded; searched after LD_LIBRARY_PATH, unlike DT_RPATH."""
    return _expand_all(obj.dynamic.runpath, obj)


def split_search_path(value: str) -> tuple[str, ...]:
    """LD_LIBRARY_PATH split as ld.so splits it (on ':' and ';'), empty entries left out."""
    return tuple(entry for entry in re.split("[:;]", value) if entry)


# -- the system folders ---------------------------------------------------------------------


def read_ld_so_conf(path: str, root: str = "/") -> list[str]:
    """The folders an ld.so.conf lists, following `include` globs as ldconfig does.

    Folders and absolute include patterns are taken inside `root`; relative patterns are
    relative to the including file's folder. `hwcap` lines are ignored; a file that cannot
    be read adds nothing (ldconfig only warns), and an include loop is followed once.
    """
    return _conf_dirs(path, root, set())


def _conf_dirs(path: str, root: str, seen: set[str]) -> list[str]:
    if path in seen:
        return []
    seen.add(path)
    try:
        lines = read_text(path, MAX_CONFIG, replace=True).splitlines()
    except (OSError, FileKindError) as exc:  # a FIFO is refused, never waited on
        log.debug("not reading %s: %s", path, exc)
        return []
    dirs: list[str] = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        words = line.split(None, 1)
        if not words or words[0] == "hwcap":
            continue
        if words[0] == "include" and len(words) == 2:
            for pattern in words[1].split():
                dirs += _included_dirs(pattern, path, root, seen)
        else:
            dirs.append(_inside(root, line.rstrip("/") or "/"))
    return dirs


def _included_dirs(pattern: str, including: str, root: str, seen: set[str]) -> list[str]:
    if not pattern.startswith("/"):
        pattern = os.path.join(os.path.dirname(including), pattern)
    elif root != "/":
        pattern = _inside(root, pattern)
    dirs: list[str] = []
    for included in sorted(glob.glob(pattern)):
        dirs += _conf_dirs(included, root, seen)
    return dirs


def _inside(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def trusted_dirs(root: str = "/") -> tuple[str, ...]:
    """The folders ld.so always searches last: multiarch ones of this machine, lib64, lib."""
    triplet = next((t for m, t, _ in _MACHINES.values() if m == platform.machine()), None)
    names = [f"lib/{triplet}", f"usr/lib/{triplet}"] if triplet else []
    return tuple(_inside(root, name) for name in [*names, "lib64", "usr/lib64", "lib", "usr/lib"])


def default_system_dirs(root: str | os.PathLike[str] = "/") -> tuple[str, ...]:
    """The system folders in search order: `root`/etc/ld.so.conf's, then the trusted ones.

    Only existing folders are kept, each once.
    """
    base = os.fspath(root)
    conf = read_ld_so_conf(_inside(base, "etc/ld.so.conf"), base)
    return tuple(dict.fromkeys(d for d in [*conf, *trusted_dirs(base)] if os.path.isdir(d)))


# -- resolving --------------------------------------------------------------------------------


def resolve_one(
    obj: SharedObject,
    needed: str,
    ld_library_path: Sequence[str],
    preloaded: Mapping[str, str],
    system_dirs: Sequence[str],
) -> Resolution:
    """Resolve one DT_NEEDED name of `obj` through the loader's steps, in their order."""
    if needed in preloaded:
        return _found(obj, Resolution(needed, preloaded[needed], "preloaded"))
    if "/" in needed:
        path = expand_tokens(needed, token_values(obj))
        if path is not None and is_candidate(path, obj.kind):
            return _found(obj, Resolution(needed, path, "path"))
        return _found(obj, Resolution(needed, None, "unresolved"))
    steps: tuple[tuple[Step, Sequence[str]], ...] = (
        ("rpath", rpath_dirs(obj)),
        ("ld_library_path", ld_library_path),
        ("runpath", runpath_dirs(obj)),
        ("system", system_dirs),
    )
    for step, dirs in steps:
        found = find_in_dirs(needed, dirs, obj.kind)
        if found is not None:
            return _found(obj, Resolution(needed, found, step))
    return _found(obj, Resolution(needed, None, "unresolved"))


def _found(obj: SharedObject, resolution: Resolution) -> Resolution:
    log.debug("%s: %s -> %s (%s)", obj.path, resolution.needed, resolution.path, resolution.step)
    return resolution


def resolve_needed(
    path: str | os.PathLike[str],
    ld_library_path: Sequence[str] = (),
    preloaded: Mapping[str, str] | None = None,
    system_dirs: Sequence[str] | None = None,
) -> tuple[Resolution, ...]:
    """Where each DT_NEEDED entry of the shared object at `path` resolves, in order.

    `ld_library_path` is the list of folders (the caller reads the environment, see
    `split_search_path`); `preloaded` maps sonames already loaded in the process to their
    paths; `system_dirs` defaults to `default_system_dirs()`.
    """
    return resolve_object(read_object(path), ld_library_path, preloaded, system_dirs)


def resolve_object(
    obj: SharedObject,
    ld_library_path: Sequence[str] = (),
    preloaded: Mapping[str, str] | None = None,
    system_dirs: Sequence[str] | None = None,
) -> tuple[Resolution, ...]:
    """`resolve_needed` for a shared object already read."""
    system = default_system_dirs() if system_dirs is None else system_dirs
    loaded = preloaded or {}
    return tuple(
        resolve_one(obj, needed, ld_library_path, loaded, system) for needed in obj.dynamic.needed
    )


# -- trees ------------------------------------------------------------------------------------


def iter_shared_objects(root: str | os.PathLike[str]) -> Iterator[str]:
    """ELF files named like shared objects under `root`, in a stable order.

    Files named *.so that are not ELF (linker scripts, placeholders) are skipped with a debug
    message. A symlink is only reported when it is loaded from another folder than its
    target, since $ORIGIN then differs.
    """
    seen: set[tuple[str, str]] = set()
    for folder, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            if not symbols.is_shared_object(filename):
                continue  # before realpath: most files of a tree are not shared objects
            path = os.path.join(folder, filename)
            key = (os.path.realpath(path), os.path.abspath(folder))
            if key in seen:
                continue
            seen.add(key)
            if _is_elf(path):
                yield path


def _is_elf(path: str) -> bool:
    try:
        with open_regular(path) as handle:  # a FIFO named *.so is skipped, never waited on
            magic = handle.read(len(reader.ELF_MAGIC))
    except (OSError, FileKindError) as exc:
        log.debug("skipping %s: %s", path, exc)
        return False
    if magic != reader.ELF_MAGIC:
        log.debug("skipping %s: named like a shared object but not ELF", path)
    return magic == reader.ELF_MAGIC


def sonames_under(
    root: str | os.PathLike[str], known: Mapping[str, SharedObject] | None = None
) -> dict[str, str]:
    """Soname (and file name) -> path of every shared object under `root`.

    For `preloaded`: e.g. torch/lib of the PyTorch that `import torch` loads before a
    consumer's extension, which then finds libc10.so without any search path of its own.
    `known` holds objects the caller has read already (keyed by anything; matched by their
    absolute path), which are not read again.
    """
    by_path = {obj.path: obj for obj in (known or {}).values()}
    found: dict[str, str] = {}
    for path in iter_shared_objects(root):
        obj = by_path.get(os.path.abspath(path)) or read_object(path)
        soname = obj.dynamic.soname
        for name in (soname, os.path.basename(path)):
            if name:
                found.setdefault(name, path)
    return found


def unresolved_in_tree(
    root: str | os.PathLike[str],
    ld_library_path: Sequence[str] = (),
    extra_preloaded: Mapping[str, str] | None = None,
    system_dirs: Sequence[str] | None = None,
    objects: Mapping[str, SharedObject] | None = None,
) -> list[tuple[str, str]]:
    """(object path, DT_NEEDED name) for every entry under `root` that resolves nowhere.

    Each object is checked on its own search paths. The tree's own libraries count as
    loaded only when the caller passes them in `extra_preloaded` (see `sonames_under`): a
    library that is found only because another one loaded it first hides a broken RPATH.
    A caller that has read the tree's objects already passes them as `objects`.
    """
    system = default_system_dirs() if system_dirs is None else system_dirs
    if objects is None:
        objects = {path: read_object(path) for path in iter_shared_objects(root)}
    unresolved: list[tuple[str, str]] = []
    for path, obj in objects.items():
        for resolution in resolve_object(obj, ld_library_path, extra_preloaded, system):
            if resolution.path is None:
                unresolved.append((path, resolution.needed))
    return unresolved
