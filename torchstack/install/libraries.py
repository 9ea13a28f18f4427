"""Whether every shared object of an installation finds its libraries when it is used.

Used by the easyblocks at sanity check. A library is found through the object's own RPATH or
RUNPATH (with $ORIGIN), the library folders of the dependency modules, the system, or because
torch has already loaded it (an extension's libc10.so, torch's CUDA runtime). Driver libraries
(libcuda.so.1, libnvidia-ml.so.1) come with the GPU driver on compute nodes, not with software
modules, and are allowed to be missing on a build host.

Only what can be loaded counts as a failure: the packages' own objects (torch/lib,
extensions, vendored *.libs) and the libraries they need, transitively. The CUDA wheels also
ship plugins that are opened on demand (NVSHMEM's MPI bootstrap, cuFile's RDMA support); their
missing libraries are reported as notes, for a site that wants those features.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from torchstack.elf import loader

_LIBRARY_DIRS = ("lib", "lib64")


def module_library_dirs(roots: Iterable[str | Path]) -> list[str]:
    """lib and lib64 of each dependency module's install root, where they exist."""
    found = []
    for root in roots:
        for name in _LIBRARY_DIRS:
            folder = Path(root) / name
            if folder.is_dir():
                found.append(str(folder))
    return found


def search_path(ld_library_path: str, module_roots: Iterable[str | Path]) -> list[str]:
    """LD_LIBRARY_PATH, then the library folders of the dependency modules (for sites that
    build with --rpath and set no LD_LIBRARY_PATH)."""
    return [p for p in ld_library_path.split(":") if p] + module_library_dirs(module_roots)


def torch_loaded_libraries(
    site_packages: Iterable[str | Path],
    objects: Mapping[str, loader.SharedObject] | None = None,
) -> dict[str, str]:
    """Sonames that importing torch loads first: torch/lib and the nvidia wheels' libraries.

    `objects` already read (those of the installation) are not read a second time.
    """
    loaded: dict[str, str] = {}
    for site in site_packages:
        for folder in (Path(site) / "torch" / "lib", Path(site) / "nvidia"):
            if folder.is_dir():
                loaded.update(loader.sonames_under(folder, objects))
    return loaded


def unresolved_libraries(
    installdir: str | Path, search_path: Iterable[str], torch_site_packages: Iterable[str | Path]
) -> tuple[list[str], list[str]]:
    """('object: needs library' failures, notes on optional plugins), driver libraries aside."""
    objects = {p: loader.read_object(p) for p in loader.iter_shared_objects(installdir)}
    missing = loader.unresolved_in_tree(
        installdir, tuple(search_path), torch_loaded_libraries(torch_site_packages, objects),
        objects=objects,
    )
    loadable = _loadable_objects(objects)
    # A plugin that needs its package's main library (triton/plugins -> libtriton.so) is
    # opened by that package after it has loaded the library.
    inside = {n for p in loadable for n in (objects[p].dynamic.soname, Path(p).name) if n}
    failures: list[str] = []
    notes: list[str] = []
    for path, needed in sorted(missing):
        if loader.DRIVER_LIBRARY.match(needed) or needed in inside:
            continue
        line = f"{path}: needs {needed}"
        (failures if path in loadable else notes).append(line)
    return failures, notes


def _loadable_objects(objects: dict[str, loader.SharedObject]) -> set[str]:
    """The packages' own objects and, transitively, the libraries they need by soname."""
    by_name: dict[str, list[str]] = {}
    for path, obj in objects.items():
        for name in (obj.dynamic.soname, Path(path).name):
            if name:
                by_name.setdefault(name, []).append(path)
    pending = [p for p in objects if not _is_vendor_library(p)]
    loadable: set[str] = set()
    while pending:
        path = pending.pop()
        if path not in loadable:
            loadable.add(path)
            pending += [q for n in objects[path].dynamic.needed for q in by_name.get(n, [])]
    return loadable


def _is_vendor_library(path: str) -> bool:
    """Libraries of the nvidia-* wheels: loaded only when something needs them."""
    return "/site-packages/nvidia/" in path
