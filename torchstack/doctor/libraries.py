"""Where every DT_NEEDED library of torch and of its consumers resolves, for the whole stack.

ld.so's steps are torchstack.elf.loader's. Two things `import torch` does first count as
loaded libraries: torch preloads the nvidia wheels' libraries it finds on sys.path
(torch/__init__.py, _preload_cuda_deps), and a consumer's extension is imported after torch,
so torch/lib is loaded by then. Libraries found in wheel folders, modules or other paths are
followed in turn, since their own needs must resolve too. Each library gets one row, as in
CuPy's preload report: where it comes from, or that it is missing and what provides it.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from torchstack.doctor.findings import Finding, info, problem, warning
from torchstack.doctor.remedies import library_fix
from torchstack.doctor.stack import Placed, Stack
from torchstack.doctor.surroundings import Surroundings
from torchstack.elf import loader, reader
from torchstack.fingerprint.read import shared_objects

log = logging.getLogger(__name__)

Source = Literal["torch", "package", "wheel", "module", "system", "path", "missing", "driver"]
# Shown in the human report only with --verbose: every Linux process loads them.
BASE_SYSTEM = frozenset({"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                         "libstdc++.so.6", "libgcc_s.so.1", "libutil.so.1",
                         "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "ld64.so.2"})
_FOLLOWED: frozenset[Source] = frozenset({"wheel", "module", "path"})
_SOURCE_WORDS = {"wheel": "pip wheels", "module": "modules", "system": "the system",
                 "package": "package folders", "path": "other folders"}
_STEP_NAMES = {"rpath": "DT_RPATH", "runpath": "DT_RUNPATH", "ld_library_path": "LD_LIBRARY_PATH",
               "preloaded": "loaded before", "path": "path"}


@dataclass(frozen=True)
class LibraryUse:
    """One library as the stack loads it: from where, and which objects need it."""

    name: str
    path: str | None
    source: Source
    where: str
    needed_by: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "source": self.source,
                "where": self.where, "needed_by": list(self.needed_by)}


@dataclass(frozen=True)
class _Object:
    path: str
    label: str
    preloaded: dict[str, str]


class _Context:
    """What classifying a resolved path needs to know about the stack and the environment."""

    def __init__(self, stack: Stack, surroundings: Surroundings, folders: Sequence[str]) -> None:
        self.surroundings = surroundings
        self.folders = [os.path.abspath(f) for f in folders]
        torch_folder = stack.torch.folder if stack.torch else None
        self.torch_dir = os.path.join(torch_folder, "torch") + "/" if torch_folder else None

    def folder_of(self, path: str) -> str | None:
        """The sys.path folder that holds `path`, if any."""
        path = os.path.normpath(path)
        return next((f for f in self.folders if path.startswith(f.rstrip("/") + "/")), None)

    def label(self, path: str) -> str:
        """A path relative to its sys.path folder (torch/lib/libc10.so), else as it is."""
        folder = self.folder_of(path)
        return os.path.relpath(path, folder) if folder else os.path.normpath(path)

    def classify(self, resolution: loader.Resolution) -> tuple[Source, str]:
        path = resolution.path
        if path is None:
            driver = loader.DRIVER_LIBRARY.match(resolution.needed)
            return ("driver", "not found (GPU driver)") if driver else ("missing", "not found")
        folder = os.path.normpath(os.path.dirname(path))
        if resolution.step == "system":
            return "system", f"system {folder}"
        module = self.surroundings.owner(path)
        if "/nvidia/" in path and self.folder_of(path):
            suffix = f" (module {module.name})" if module else ""
            return "wheel", f"pip wheel folder {folder}{suffix}"
        if self.torch_dir and path.startswith(self.torch_dir):
            return "torch", "torch"
        if module is not None:
            return "module", f"module {module.name} ({folder})"
        if self.folder_of(path):
            return "package", f"package folder {folder}"
        return "path", f"{_STEP_NAMES.get(resolution.step, resolution.step)} {folder}"


class _Resolver:
    """loader.resolve_one with memory: torch's objects share one RPATH, and every object
    asks for libc.so.6; each distinct lookup reads its candidate files once."""

    def __init__(self, search: Sequence[str], system: Sequence[str]) -> None:
        self.search, self.system = search, system
        self._known: dict[tuple[object, ...], loader.Resolution] = {}

    def resolve(self, obj: loader.SharedObject, needed: str,
                preloaded: dict[str, str]) -> loader.Resolution:
        if "/" in needed:  # relative to the object itself: nothing to share
            return loader.resolve_one(obj, needed, self.search, preloaded, self.system)
        key = (needed, loader.rpath_dirs(obj), loader.runpath_dirs(obj), obj.kind,
               id(preloaded))
        if key not in self._known:
            self._known[key] = loader.resolve_one(obj, needed, self.search, preloaded,
                                                  self.system)
        return self._known[key]


def resolve_stack(stack: Stack, surroundings: Surroundings, folders: Sequence[str],
                  system_dirs: Sequence[str] | None = None,
                  ) -> tuple[list[LibraryUse], list[str]]:
    """Every library the stack's shared objects need, and the objects that cannot be read."""
    context = _Context(stack, surroundings, folders)
    system = loader.default_system_dirs() if system_dirs is None else system_dirs
    resolver = _Resolver(loader.split_search_path(surroundings.ld_library_path), system)
    nvidia = nvidia_preloads(folders) if stack.provider and stack.provider.torch.cuda else {}
    torch_libs = _torch_libraries(stack.torch)
    pending = [*_objects(stack.torch, nvidia, context)]
    after_torch = {**nvidia, **torch_libs}
    for consumer in stack.consumers:
        pending += _objects(consumer.placed, after_torch, context)
    uses: dict[tuple[str, str | None], tuple[Source, str, list[str]]] = {}
    unreadable: list[str] = []
    queued = {o.path for o in pending}
    while pending:
        current = pending.pop(0)
        try:
            obj = loader.read_object(current.path)
        except (loader.LoaderError, reader.ElfError) as exc:
            unreadable.append(f"{current.label}: {exc}")
            continue
        for needed in obj.dynamic.needed:
            resolution = resolver.resolve(obj, needed, current.preloaded)
            source, where = context.classify(resolution)
            key = (needed, resolution.path)
            uses.setdefault(key, (source, where, []))[2].append(current.label)
            if source in _FOLLOWED and resolution.path and resolution.path not in queued:
                queued.add(resolution.path)
                pending.append(_Object(resolution.path, context.label(resolution.path),
                                       current.preloaded))
    rows = [LibraryUse(name, path, s, w, tuple(by)) for (name, path), (s, w, by) in uses.items()]
    return sorted(rows, key=_row_order), unreadable


def _row_order(use: LibraryUse) -> tuple[int, str]:
    rank = {"missing": 0, "driver": 1}.get(use.source, 2)
    return rank, use.name


def _objects(placed: Placed | None, preloaded: dict[str, str], context: _Context) -> list[_Object]:
    if placed is None:
        return []
    paths = [os.path.join(placed.folder, p) for p in shared_objects(placed.dist)]
    return [_Object(p, context.label(p), preloaded) for p in paths]


def nvidia_preloads(folders: Iterable[str]) -> dict[str, str]:
    """Library file name -> path in nvidia/*/lib of the first sys.path folder that has it."""
    found: dict[str, str] = {}
    for folder in folders:
        pattern = os.path.join(glob.escape(folder), "nvidia", "*", "lib", "*.so*")
        for path in sorted(glob.glob(pattern)):
            found.setdefault(os.path.basename(path), path)
    return found


def _torch_libraries(torch: Placed | None) -> dict[str, str]:
    if torch is None:
        return {}
    lib = os.path.join(torch.folder, "torch", "lib")
    return loader.sonames_under(lib) if os.path.isdir(lib) else {}


def library_findings(uses: Sequence[LibraryUse], unreadable: Sequence[str], stack: Stack,
                     python_version: str) -> list[Finding]:
    """A problem for each missing library with its fix, info for driver libraries."""
    provider = stack.provider
    requires = stack.torch.dist.requires_dist if stack.torch else ()
    findings = []
    for name in dict.fromkeys(u.name for u in uses if u.source in ("missing", "driver")):
        rows = [u for u in uses if u.name == name and u.path is None]
        needed_by = [label for u in rows for label in u.needed_by]
        if rows[0].source == "driver":
            findings.append(info("driver-library",
                                 f"{name} not found: the NVIDIA driver provides it on GPU nodes",
                                 "nothing to do without a GPU; on a GPU node, check the driver"))
            continue
        needers = sorted({_top_level(label) for label in needed_by} - {"torch"})
        fix = library_fix(name, provider, requires, python_version, needers)
        findings.append(problem("library-missing",
                                f"{name} not found, needed by {_some(needed_by)}", fix))
    findings += [warning("library-unreadable", f"cannot read {line}") for line in unreadable]
    found = [u for u in uses if u.path is not None]
    if found:
        counts = _count_sources(found)
        findings.append(info("libraries", f"{len({u.name for u in found})} libraries resolve "
                                          f"({counts})"))
    return findings


def _count_sources(uses: Sequence[LibraryUse]) -> str:
    counts: dict[str, set[str]] = {}
    for use in uses:
        counts.setdefault(use.source, set()).add(use.name)
    return ", ".join(f"{len(names)} from {_SOURCE_WORDS.get(source, source)}"
                     for source, names in sorted(counts.items()))


def _top_level(label: str) -> str:
    return label.split("/", 1)[0].removesuffix(".libs")


def _some(labels: Sequence[str], shown: int = 3) -> str:
    unique = list(dict.fromkeys(labels))
    more = len(unique) - shown
    return ", ".join(unique[:shown]) + (f" and {more} more" if more > 0 else "")
