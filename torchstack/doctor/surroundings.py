"""What the shell environment brings: loaded EasyBuild modules and their Python folders.

EasyBuild modules set $EBROOT<NAME> to their install root, Lmod lists them in
$LOADEDMODULES, and Python packages reach sys.path through $PYTHONPATH or, with
--prefer-python-search-path=EBPYTHONPREFIXES, through $EBPYTHONPREFIXES, which only the
sitecustomize.py of EasyBuild's own Python module reads.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

_EBROOT = re.compile(r"^EBROOT([A-Z0-9_]+)$")


@dataclass(frozen=True)
class LoadedModule:
    """An EasyBuild module in the environment: its full name (or $EBROOT<NAME>) and root."""

    name: str
    root: str


@dataclass(frozen=True)
class SiteDir:
    """A site-packages folder the environment offers, and through which variable."""

    path: str
    via: str  # "PYTHONPATH", "EBPYTHONPREFIXES" or "EBROOT<NAME>"
    module: LoadedModule | None


@dataclass(frozen=True)
class Surroundings:
    """The environment variables doctor reads, parsed once."""

    modules: tuple[LoadedModule, ...]
    pythonpath: tuple[str, ...]
    ebpythonprefixes: tuple[str, ...]
    path: str
    ld_library_path: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Surroundings:
        return cls(
            modules=loaded_modules(environ),
            pythonpath=_split(environ.get("PYTHONPATH", "")),
            ebpythonprefixes=_split(environ.get("EBPYTHONPREFIXES", "")),
            path=environ.get("PATH", os.defpath),
            ld_library_path=environ.get("LD_LIBRARY_PATH", ""),
        )

    def owner(self, path: str) -> LoadedModule | None:
        """The module whose root holds `path` (the deepest root, if roots nest)."""
        candidates = {os.path.abspath(path), os.path.realpath(path)}
        best: LoadedModule | None = None
        for module in self.modules:
            root = os.path.abspath(module.root)
            inside = any(c == root or c.startswith(root.rstrip("/") + "/") for c in candidates)
            if inside and (best is None or len(root) > len(best.root)):
                best = module
        return best

    def site_dirs(self, version: str) -> list[SiteDir]:
        """Every site-packages folder the environment offers to a Python of `version`."""
        found = [SiteDir(os.path.abspath(p), "PYTHONPATH", self.owner(p)) for p in self.pythonpath]
        for prefix in self.ebpythonprefixes:
            for path in _site_packages(prefix, version):
                found.append(SiteDir(path, "EBPYTHONPREFIXES", self.owner(path)))
        for module in self.modules:
            for path in _site_packages(module.root, "*"):
                found.append(SiteDir(path, f"$EBROOT of {module.name}", module))
        unique: dict[str, SiteDir] = {}
        for site in found:
            unique.setdefault(os.path.realpath(site.path), site)
        return list(unique.values())


def loaded_modules(environ: Mapping[str, str]) -> tuple[LoadedModule, ...]:
    """$EBROOT<NAME> roots, named after the matching entry of $LOADEDMODULES."""
    loaded = [m for m in environ.get("LOADEDMODULES", "").split(":") if m]
    modules = []
    for key, root in sorted(environ.items()):
        match = _EBROOT.match(key)
        if match and root:
            names = [m for m in loaded if eb_variable(m.split("/")[0]) == match.group(1)]
            modules.append(LoadedModule(names[-1] if names else f"${key}", root))
    return tuple(modules)


def eb_variable(name: str) -> str:
    """EasyBuild's $EBROOT suffix for a software name: cuDNN -> CUDNN, Py-Foo -> PYMINFOO."""
    return name.upper().replace("-", "MIN").replace("+", "PLUS").replace(".", "")


def _split(value: str) -> tuple[str, ...]:
    return tuple(p for p in value.split(os.pathsep) if p)


def _site_packages(prefix: str, version: str) -> list[str]:
    pattern = os.path.join(glob.escape(prefix), "lib", f"python{version}", "site-packages")
    return sorted(p for p in glob.glob(pattern) if os.path.isdir(p))
