"""Where torch and its consumers come from on sys.path, and what hides what.

Each sys.path folder has an origin: the venv itself, the user site, a loaded module
($PYTHONPATH, $EBPYTHONPREFIXES, $EBROOT<NAME>), or the base Python. Doctor reports a torch
or consumer that shadows another of a different origin, a module's torch that this Python
cannot see at all, and a torch built for another Python.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from torchstack.doctor.findings import Finding, problem, warning
from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.stack import Placed, Stack, torch_at
from torchstack.doctor.surroundings import SiteDir, Surroundings
from torchstack.elf import reader
from torchstack.fingerprint.read import FingerprintError, provider_fingerprint

Kind = Literal["venv", "user", "module", "base", "other"]
_PYTHON_DIR = re.compile(r"/lib/python(\d+\.\d+)/site-packages/?$")


@dataclass(frozen=True)
class Origin:
    """Who put a folder on sys.path, in words for a message."""

    kind: Kind
    label: str
    module: str | None = None


@dataclass(frozen=True)
class Places:
    """Classifies sys.path folders for one interpreter in one environment."""

    interpreter: Interpreter
    surroundings: Surroundings

    def origin(self, folder: str) -> Origin:
        real = os.path.realpath(folder)
        site = self._site_dir(real)
        if self.interpreter.user_site and real == os.path.realpath(self.interpreter.user_site):
            return Origin("user", f"the user site {folder}")
        if site is not None:
            module = site.module.name if site.module else None
            label = f"module {module}" if module else f"${site.via.lstrip('$')}"
            return Origin("module", label, module)
        if self.interpreter.in_venv and _inside(real, self.interpreter.prefix):
            return Origin("venv", f"the venv {self.interpreter.prefix}")
        if _inside(real, self.interpreter.base_prefix):
            return Origin("base", f"the Python at {self.interpreter.base_prefix}")
        return Origin("other", folder)

    @cached_property
    def site_dirs(self) -> list[SiteDir]:
        """The environment's site-packages folders (any Python version for module roots)."""
        return self.surroundings.site_dirs(self.interpreter.version_text)

    def _site_dir(self, real: str) -> SiteDir | None:
        for site in self.site_dirs:
            if os.path.realpath(site.path) == real:
                return site
        owner = self.surroundings.owner(real)
        return SiteDir(real, f"$EBROOT of {owner.name}", owner) if owner else None


def placement_findings(stack: Stack, places: Places) -> list[Finding]:
    findings = [*shadowed_torches(stack, places), *shadowed_consumers(stack, places)]
    findings += invisible_torches(stack, places)
    mismatch = python_mismatch(stack, places.interpreter)
    return findings + ([mismatch] if mismatch else [])


def shadowed_torches(stack: Stack, places: Places) -> list[Finding]:
    """A problem (other abi tag) or warning (same tag) for each torch behind the active one."""
    if stack.torch is None or stack.provider is None:
        return []
    active, first = stack.provider, places.origin(stack.torch.folder)
    findings = []
    for folder in stack.torch_folders[1:]:
        version, tag = torch_version(folder)
        second = places.origin(folder)
        message = (f"torch {active.version} from {first.label} ({stack.torch.folder}) shadows "
                   f"torch {version} from {second.label} ({folder})")
        make = warning if tag == active.abi_tag else problem
        findings.append(make("torch-shadowed", message,
                             _shadow_fix("torch", first, second, places.interpreter)))
    return findings


def torch_version(folder: str) -> tuple[str, str | None]:
    """The version (with its local tag, from version.py) and abi tag of the torch in `folder`."""
    placed = torch_at(folder)
    try:
        found = provider_fingerprint(placed.dist)
    except (FingerprintError, reader.ElfError, OSError):
        return placed.dist.version, None
    return found.version, found.abi_tag


def shadowed_consumers(stack: Stack, places: Places) -> list[Finding]:
    """A warning for each consumer whose copy from another origin is hidden behind it."""
    findings = []
    for hidden in stack.hidden:
        consumer = stack.consumer(hidden.dist.name)
        if consumer is None:
            continue
        first, second = places.origin(consumer.placed.folder), places.origin(hidden.folder)
        if first == second:
            continue
        message = (f"{consumer.placed.label} from {first.label} shadows {hidden.label} "
                   f"from {second.label}")
        findings.append(warning("consumer-shadowed", message,
                                _shadow_fix(hidden.dist.name, first, second, places.interpreter)))
    return findings


def _shadow_fix(name: str, first: Origin, second: Origin, interpreter: Interpreter) -> str:
    if first.kind == "user":
        return (f"pip uninstall {name} from the user site (python -m pip uninstall {name} "
                "with PYTHONNOUSERSITE unset), or export PYTHONNOUSERSITE=1")
    if first.kind == "venv" and second.kind == "module":
        return (f"pip uninstall {name} in the venv {interpreter.prefix} to use the {name} of "
                f"{second.label}, or unload {second.module or 'that module'}")
    if first.kind == "module" and second.kind == "venv":
        return (f"the venv's {name} is never imported: pip uninstall {name} in the venv "
                f"{interpreter.prefix}, or unload {first.module or 'the module'} to use it")
    return f"keep one {name}: remove the one of {second.label} or the one of {first.label}"


def invisible_torches(stack: Stack, places: Places) -> list[Finding]:
    """A problem for each module's torch that is not on this interpreter's sys.path."""
    interpreter = places.interpreter
    seen = {os.path.realpath(p) for p in interpreter.path}
    with_torch = [s for s in places.site_dirs
                  if os.path.isfile(os.path.join(s.path, "torch", "__init__.py"))]
    findings = []
    for site in with_torch:
        if os.path.realpath(site.path) in seen or _has_own_version(site, with_torch, interpreter):
            continue
        who = f"module {site.module.name}" if site.module else f"${site.via.lstrip('$')}"
        version, _ = torch_version(site.path)
        reason, fix = _why_invisible(site, interpreter)
        findings.append(problem(
            "module-torch-invisible",
            f"{who} provides torch {version} in {site.path}, but this Python "
            f"({interpreter.executable}) does not see it: {reason}", fix))
    return findings


def _has_own_version(site: SiteDir, sites: list[SiteDir], interpreter: Interpreter) -> bool:
    """A module with torch for several Pythons (multi_deps): only this Python's one counts."""
    match = _PYTHON_DIR.search(site.path)
    if site.module is None or match is None or match.group(1) == interpreter.version_text:
        return False
    own = f"/lib/python{interpreter.version_text}/site-packages"
    return any(s.module == site.module and s.path.endswith(own) for s in sites)


def _why_invisible(site: SiteDir, interpreter: Interpreter) -> tuple[str, str]:
    match = _PYTHON_DIR.search(site.path)
    if match and match.group(1) != interpreter.version_text:
        return (f"it is for Python {match.group(1)}, this is Python {interpreter.version_text}",
                f"use the Python {match.group(1)} that the module was built for")
    if interpreter.in_venv and not interpreter.system_site_packages:
        return ("the venv was created without --system-site-packages, so the Python "
                "module's sitecustomize.py, which adds $EBPYTHONPREFIXES, never runs",
                "recreate the venv from the module's Python with "
                "python -m venv --system-site-packages")
    return ("it is on neither $PYTHONPATH nor a path that this Python's site adds",
            "use the Python of the loaded modules, or add the folder to $PYTHONPATH")


def python_mismatch(stack: Stack, interpreter: Interpreter) -> Finding | None:
    """torch/_C built for another Python (a cpython-311 torch seen by Python 3.12)."""
    if stack.torch is None:
        return None
    extensions = foreign_extensions(stack.torch.folder, interpreter)
    if not extensions:
        return None
    return problem("torch-python-mismatch",
                   f"torch {stack.torch.dist.version} in {stack.torch.folder} is built for "
                   f"another Python ({extensions[0]}), not Python {interpreter.version_text}",
                   "use the Python that torch was installed for, or install torch for "
                   f"Python {interpreter.version_text}")


def foreign_extensions(folder: str, interpreter: Interpreter) -> list[str]:
    """The torch/_C extensions in `folder` when none of them is for `interpreter`, else []."""
    pattern = os.path.join(glob.escape(folder), "torch", "_C.*so")
    extensions = sorted(os.path.basename(p) for p in glob.glob(pattern))
    if any(e[len("_C"):] in interpreter.ext_suffixes for e in extensions):
        return []
    return extensions


def site_python(folder: str) -> str | None:
    """The X.Y of a .../lib/pythonX.Y/site-packages folder, None for any other folder."""
    match = _PYTHON_DIR.search(folder)
    return match.group(1) if match else None


def _inside(path: str, prefix: str) -> bool:
    root = os.path.realpath(prefix).rstrip("/") + "/"
    return path.startswith(root)


__all__ = ["Origin", "Placed", "Places", "placement_findings"]
