"""Every module of an EasyBuild install path with its torch fingerprint, and what a swap breaks.

An install path holds module files in `modules/all/<Name>/<version>[.lua]` and installations
in `software/<Name>/<version>/`. A module's fingerprint is the one its installation recorded
(`easybuild/torchstack-fingerprint.json`), else one read from the installation on the fly
(its torch if it has one, else its most strongly linked consumer, as the easyblocks record
it). A module whose installation holds nothing torch-related (or no Python at all) has no
fingerprint: it stays in the listing as "no torch" and is never part of a swap.

The PyTorch module a consumer runs on is the nearest provider among the modules it loads,
followed breadth-first through their module files (torchdata -> torchvision -> PyTorch).
A load names a module by full name, or by bare name when exactly one version is installed.
A consumer fingerprinted on the fly that links libtorch's C++ API without naming a torch
release is taken as built on the PyTorch it runs on (`compat.assume_built_against`).

An installation that cannot be read stops the scan with an error rather than being left out:
a swap judged on half a stack would call breaking modules safe.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from torchstack import compat
from torchstack._moduleloads import module_dependencies, module_files
from torchstack.distributions import DistributionError, site_packages_of
from torchstack.errors import TorchstackError
from torchstack.fingerprint import Fingerprint, FingerprintError, installation_fingerprints
from torchstack.record import FINGERPRINT_FILE, read_fingerprint, write_fingerprint

log = logging.getLogger(__name__)

Source = Literal["recorded", "scanned"]
_LINK_RANK = {"python": 0, "stable": 1, "cxx": 2}


class ScanError(TorchstackError):
    """An install path that cannot be scanned, or a swap that names no suitable module."""


@dataclass(frozen=True)
class InstalledModule:
    """One module file, its installation, what it loads and its fingerprint."""

    name: str
    module_file: Path
    software: Path
    dependencies: tuple[str, ...]
    fingerprint: Fingerprint | None
    source: Source | None
    runs_on: str | None = None

    @property
    def role(self) -> str:
        """provider, consumer, or "no torch" for a module without a fingerprint."""
        return self.fingerprint.role if self.fingerprint is not None else "no torch"

    @property
    def is_provider(self) -> bool:
        return self.fingerprint is not None and self.fingerprint.role == "provider"

    @property
    def is_consumer(self) -> bool:
        return self.fingerprint is not None and self.fingerprint.role == "consumer"

    def to_json(self) -> dict[str, Any]:
        found = self.fingerprint
        return {
            "module": self.name,
            "role": found.role if found is not None else None,
            "link": found.link if found is not None else None,
            "abi_tag": found.abi_tag if found is not None else None,
            "runs_on": self.runs_on,
            "fingerprint_source": self.source,
            "module_file": str(self.module_file),
            "software": str(self.software),
            "dependencies": list(self.dependencies),
            "fingerprint": found.to_json() if found is not None else None,
        }


@dataclass(frozen=True)
class Scan:
    """The modules of one install path, in name order."""

    installpath: Path
    modules: tuple[InstalledModule, ...]

    def get(self, name: str) -> InstalledModule | None:
        return next((m for m in self.modules if m.name == name), None)

    def providers(self) -> tuple[InstalledModule, ...]:
        return tuple(m for m in self.modules if m.is_provider)

    def consumers_of(self, provider: str) -> tuple[InstalledModule, ...]:
        """The consumer modules that run on the provider module `provider`."""
        return tuple(m for m in self.modules if m.is_consumer and m.runs_on == provider)

    def to_json(self) -> dict[str, Any]:
        return {
            "installpath": str(self.installpath),
            "modules": [m.to_json() for m in self.modules],
        }


@dataclass(frozen=True)
class SwapOutcome:
    """What swapping the PyTorch under one consumer module does to it."""

    module: str
    abi_tag: str
    verdict: compat.Verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "abi_tag": self.abi_tag,
            "reasons": list(self.verdict.reasons),
            "line": self.verdict.line(),
        }


@dataclass(frozen=True)
class SwapReport:
    """The consumers of `source` that a swap to `target` would break, and those it spares."""

    source: InstalledModule
    target: InstalledModule
    would_break: tuple[SwapOutcome, ...]
    stays_safe: tuple[SwapOutcome, ...]

    @property
    def safe(self) -> bool:
        return not self.would_break

    def to_json(self) -> dict[str, Any]:
        return {
            "from": {"module": self.source.name, "abi_tag": _tag(self.source)},
            "to": {"module": self.target.name, "abi_tag": _tag(self.target)},
            "safe": self.safe,
            "would_break": [o.to_json() for o in self.would_break],
            "stays_safe": [o.to_json() for o in self.stays_safe],
        }


def scan_installpath(installpath: str | Path) -> Scan:
    """Read every module of an EasyBuild install path and the PyTorch each consumer runs on."""
    root = Path(installpath)
    modules_all = root / "modules" / "all"
    if not root.exists():
        raise ScanError(f"install path {str(root)!r} does not exist")
    if not modules_all.is_dir():
        raise ScanError(f"{str(root)!r} has no modules/all: not an EasyBuild install path")
    found = [read_module(root, name, path) for name, path in module_files(modules_all)]
    return Scan(root, _link_providers(found))


def read_module(root: Path, name: str, module_file: Path) -> InstalledModule:
    """One module: its loads and its fingerprint, recorded or read from software/<name>."""
    software = root / "software" / name
    fingerprint, source = fingerprint_installation(software)
    log.debug("%s: %s fingerprint %s", name, source or "no",
              fingerprint.abi_tag if fingerprint else "-")
    return InstalledModule(name, module_file, software, module_dependencies(module_file),
                           fingerprint, source)


def fingerprint_installation(software: Path) -> tuple[Fingerprint | None, Source | None]:
    """The recorded fingerprint of an installation, else one read from it, else none."""
    recorded = _recorded(software)
    if recorded is not None:
        return recorded, "recorded"
    try:
        site_packages_of(software)
    except DistributionError:
        log.debug("%s: no Python distributions, no torch", software)
        return None, None
    provider, consumers = installation_fingerprints(software)
    strongest = max(consumers, key=lambda c: _LINK_RANK[c.link or "python"], default=None)
    found = provider or strongest
    return found, ("scanned" if found is not None else None)


def _recorded(software: Path) -> Fingerprint | None:
    where = str(software / FINGERPRINT_FILE)
    try:
        return read_fingerprint(software)
    except ValueError as exc:  # JSON syntax, or not UTF-8
        raise ScanError(f"{where!r} is not a fingerprint JSON file: {exc}") from exc
    except FingerprintError as exc:
        raise ScanError(f"{where!r}: {exc}") from exc


def _link_providers(modules: list[InstalledModule]) -> tuple[InstalledModule, ...]:
    """Each consumer with the provider module it runs on (its C++ release assumed if unknown)."""
    by_name = {m.name: m for m in modules}
    by_bare: dict[str, list[InstalledModule]] = {}
    for module in modules:
        by_bare.setdefault(module.name.partition("/")[0], []).append(module)

    def resolve(written: str) -> InstalledModule | None:
        bare = by_bare.get(written, [])
        return by_name.get(written) or (bare[0] if len(bare) == 1 else None)

    return tuple(_with_provider(m, resolve) for m in modules)


def _with_provider(
    module: InstalledModule, resolve: Callable[[str], InstalledModule | None]
) -> InstalledModule:
    own = module.fingerprint
    if own is None or own.role != "consumer":
        return module
    provider = _nearest_provider(module, resolve)
    if provider is None or provider.fingerprint is None:
        log.debug("%s: no provider module among its loads", module.name)
        return module
    if module.source == "scanned":
        own = compat.assume_built_against(provider.fingerprint, own)
    return replace(module, runs_on=provider.name, fingerprint=own)


def _nearest_provider(
    start: InstalledModule, resolve: Callable[[str], InstalledModule | None]
) -> InstalledModule | None:
    """Breadth-first through the loads of `start`: the first provider module reached."""
    seen = {start.name}
    queue = deque(start.dependencies)
    while queue:
        written = queue.popleft()
        module = resolve(written)
        if module is None:
            log.debug("%s: loads %r, which is not installed here", start.name, written)
            continue
        if module.name in seen:
            continue
        seen.add(module.name)
        if module.is_provider:
            log.debug("%s runs on %s (through %r)", start.name, module.name, written)
            return module
        queue.extend(module.dependencies)
    return None


def record_scanned(scan: Scan) -> list[InstalledModule]:
    """Write the fingerprint of every module that had none recorded (modules that predate
    torchstack), as the hooks file would have: the SitePackage.lua hook reads these files.
    A consumer is recorded only once the provider it runs on is known, since an extension
    whose metadata names no torch release is taken as built against that provider's torch."""
    recorded = []
    for module in scan.modules:
        if module.source != "scanned" or module.fingerprint is None:
            continue
        if module.is_consumer and module.runs_on is None:
            log.warning("%s: no PyTorch module among its loads; not recorded", module.name)
            continue
        write_fingerprint(module.software, module.fingerprint)
        recorded.append(module)
    return recorded


def plan_swap(scan: Scan, source: str, target: str) -> SwapReport:
    """Check every consumer that runs on `source` against the fingerprint of `target`."""
    old, new, provider = _swap_modules(scan, source, target)
    breaking: list[SwapOutcome] = []
    safe: list[SwapOutcome] = []
    for consumer in scan.consumers_of(old.name):
        if consumer.fingerprint is None:  # consumers_of yields fingerprinted modules only
            continue
        verdict = compat.check(provider, consumer.fingerprint)
        outcome = SwapOutcome(consumer.name, consumer.fingerprint.abi_tag, verdict)
        (safe if verdict.compatible else breaking).append(outcome)
    return SwapReport(old, new, tuple(breaking), tuple(safe))


def _swap_modules(
    scan: Scan, source: str, target: str
) -> tuple[InstalledModule, InstalledModule, Fingerprint]:
    """FROM, TO and TO's fingerprint; every problem with either is reported at once."""
    problems = [p for p in (_not_provider(scan, "FROM", source),
                            _not_provider(scan, "TO", target)) if p]
    old, new = scan.get(source), scan.get(target)
    if problems or old is None or new is None or new.fingerprint is None:
        providers = ", ".join(m.name for m in scan.providers()) or "none"
        raise ScanError(f"{'; '.join(problems)} (torch providers installed: {providers})")
    return old, new, new.fingerprint


def _not_provider(scan: Scan, label: str, name: str) -> str | None:
    """Why module `name` cannot be one side of a swap, None when it can."""
    module = scan.get(name)
    if module is None:
        return f"{label} module {name!r} is not installed in {str(scan.installpath)!r}"
    if module.fingerprint is None:
        return f"{label} module {name!r} has no torch fingerprint, it is not a torch provider"
    if not module.is_provider:
        return (f"{label} module {name!r} is a {module.role} "
                f"({module.fingerprint.abi_tag}), not a torch provider")
    return None


def _tag(module: InstalledModule) -> str | None:
    return module.fingerprint.abi_tag if module.fingerprint is not None else None
