"""Every module of an EasyBuild install path with its torch fingerprint, and what a swap breaks.

An install path holds module files in `modules/all` and installations in `software`. A
module's installation is the `root` its module file names (EasyBuild writes it into every
module file it generates), else `software/<full name>` (`PyTorch/2.6.0` in `software/PyTorch/
2.6.0`, the layout of EasyBuild's flat naming scheme); the file decides, since a hierarchical
scheme puts `modules/all/Core/PyTorch/2.6.0` beside `software/PyTorch/2.6.0`. A module's
fingerprint is the one its installation recorded
(`easybuild/torchstack-fingerprint.json`), else one read from the installation on the fly
(its torch if it has one, else its most strongly linked consumer, as the easyblocks record
it). A module whose installation holds nothing torch-related (or no Python at all) has no
fingerprint: it stays in the listing as "no torch" and is never part of a swap.

Module files are those Lmod sees (`moduletree`: symlinked folders and files followed, a
symlink loop walked once, editor backups and torchstack's own staging files skipped).
The PyTorch module a consumer runs on is the nearest provider among the modules it loads,
followed breadth-first through their module files (torchdata -> torchvision -> PyTorch).
A load names the module Lmod would load for it: a full name, an alias, a symbolic version,
or a default (marked, else the highest version), under the MODULEPATH that the loading module
is loaded under (`modulepaths`: in a hierarchical tree its own level and the levels above it
that its toolchain modules add; `modules/all` alone in a flat one). A consumer that reaches
different PyTorch modules under the different MODULEPATHs it can be loaded under has no one
PyTorch: it is not checked either. A consumer fingerprinted on the fly that
links libtorch's C++ API without naming a torch release is taken as built on the PyTorch it
runs on (`compat.assume_built_against`).

A consumer whose PyTorch is not found (a load that names no module here, a module file or a
default that cannot be read, or no PyTorch among its loads at all: it runs on whichever the
user loads) may run on FROM: `plan_swap` reports it as not checked, never as safe, and so
does it with every folder the walk could not list.

A module whose installation or recorded fingerprint cannot be read (missing, no folder or
no regular file, unreadable, damaged) is "unknown" with the reason, never "no torch": a swap
judged on half a stack would call breaking modules safe. `plan_swap` reports each unknown
module whose loads lead to FROM as not checked, and the swap is then not safe.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchstack._files import FileKindError
from torchstack.distributions import DistributionError, site_packages_of
from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint, installation_fingerprints
from torchstack.guards.moduleloads import ModuleFacts, module_facts
from torchstack.guards.modulepaths import Hierarchy, Modulepath, read_hierarchy
from torchstack.guards.moduletree import Resolved, TreeError, read_tree
from torchstack.guards.protocol import FINGERPRINT_FILE
from torchstack.guards.record import Source, fingerprint_of, read_fingerprint, write_fingerprint
from torchstack.guards.sitepackage import MAX_FINGERPRINT_BYTES

log = logging.getLogger(__name__)


class ScanError(TorchstackError):
    """An install path that cannot be scanned, or a swap that names no suitable module."""


class Unreadable(TorchstackError):
    """An installation, or its recorded fingerprint, that cannot be read: its module is
    unknown, neither "no torch" nor safe."""


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
    unreadable: str | None = None  # why its installation cannot be read: role "unknown"
    loads_unknown: bool = False  # its module file cannot be read: it may load anything
    undetermined: str | None = None  # why the PyTorch it runs on cannot be told

    @property
    def role(self) -> str:
        """provider, consumer, "unknown" (unreadable) or "no torch" (nothing torch there)."""
        if self.unreadable is not None:
            return "unknown"
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
            "role": self.role if self.role != "no torch" else None,
            "unreadable": self.unreadable,
            "link": found.link if found is not None else None,
            "abi_tag": found.abi_tag if found is not None else None,
            "runs_on": self.runs_on,
            "runs_on_unknown": self.undetermined,
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
    problems: tuple[tuple[str, str], ...] = ()  # (folder, why) of modules/all not listed

    def get(self, name: str) -> InstalledModule | None:
        return next((m for m in self.modules if m.name == name), None)

    def providers(self) -> tuple[InstalledModule, ...]:
        return tuple(m for m in self.modules if m.is_provider)

    def consumers_of(self, provider: str) -> tuple[InstalledModule, ...]:
        """The consumer modules that run on the provider module `provider`."""
        return tuple(m for m in self.modules if m.is_consumer and m.runs_on == provider)

    def unknown(self) -> tuple[InstalledModule, ...]:
        """The modules whose installation cannot be read."""
        return tuple(m for m in self.modules if m.unreadable is not None)

    def unknown_on(self, provider: str) -> tuple[InstalledModule, ...]:
        """The unreadable modules whose loads lead to `provider` or cannot be read, and the
        modules that may run on any PyTorch: their own cannot be told."""
        return tuple(m for m in self.modules
                     if (m.unreadable is not None and (m.runs_on == provider or m.loads_unknown))
                     or (m.undetermined is not None and m.runs_on is None))

    def to_json(self) -> dict[str, Any]:
        return {
            "installpath": str(self.installpath),
            "modules": [m.to_json() for m in self.modules],
            "problems": [{"folder": f, "reason": why} for f, why in self.problems],
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
class NotChecked:
    """A module that may run on FROM but whose installation cannot be read."""

    module: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "reason": self.reason}


@dataclass(frozen=True)
class SwapReport:
    """What a swap from `source` to `target` breaks, spares and could not check (unsafe)."""

    source: InstalledModule
    target: InstalledModule
    would_break: tuple[SwapOutcome, ...]
    stays_safe: tuple[SwapOutcome, ...]
    not_checked: tuple[NotChecked, ...] = ()

    @property
    def safe(self) -> bool:
        return not self.would_break and not self.not_checked

    def to_json(self) -> dict[str, Any]:
        return {
            "from": {"module": self.source.name, "abi_tag": _tag(self.source)},
            "to": {"module": self.target.name, "abi_tag": _tag(self.target)},
            "safe": self.safe,
            "would_break": [o.to_json() for o in self.would_break],
            "stays_safe": [o.to_json() for o in self.stays_safe],
            "not_checked": [o.to_json() for o in self.not_checked],
        }


def scan_installpath(installpath: str | Path) -> Scan:
    """Read every module of an EasyBuild install path and the PyTorch each consumer runs on."""
    root = Path(installpath)
    modules_all = root / "modules" / "all"
    if not root.exists():
        raise ScanError(f"install path {str(root)!r} does not exist")
    if not modules_all.is_dir():
        raise ScanError(f"{str(root)!r} has no modules/all: not an EasyBuild install path")
    try:
        tree = read_tree(modules_all)
    except TreeError as exc:
        raise ScanError(str(exc)) from exc
    facts = {name: _facts(path) for name, path in tree.modules.items()}
    hierarchy = read_hierarchy(tree, {n: f for n, f in facts.items() if isinstance(f, ModuleFacts)})
    found = [read_module(root, name, path, facts[name]) for name, path in tree.modules.items()]
    return Scan(root, _link_providers(found, hierarchy), tree.problems)


def _facts(module_file: Path) -> ModuleFacts | str:
    """What a module file says, or why it cannot be read."""
    try:
        return module_facts(module_file)
    except (OSError, FileKindError) as exc:
        return f"cannot read its module file {str(module_file)!r}: {_reason(exc)}"


def read_module(root: Path, name: str, module_file: Path,
                facts: ModuleFacts | str | None = None) -> InstalledModule:
    """One module: its loads and its fingerprint, recorded or read from its installation;
    an installation that cannot be read makes the module unknown, with the reason."""
    facts = _facts(module_file) if facts is None else facts
    if isinstance(facts, str):
        software = root / "software" / name
        return InstalledModule(name, module_file, software, (), None, None, None, facts, True)
    software = installation_of(root, name, facts.root)
    dependencies = facts.loads
    try:
        fingerprint, source = fingerprint_installation(software)
    except Unreadable as exc:
        return InstalledModule(name, module_file, software, dependencies, None, None,
                               unreadable=str(exc))
    log.debug("%s: %s fingerprint %s", name, source or "no",
              fingerprint.abi_tag if fingerprint else "-")
    return InstalledModule(name, module_file, software, dependencies, fingerprint, source)


def installation_of(root: Path, name: str, written: str | None) -> Path:
    """The installation of module `name`: the absolute `root` its module file names, else
    `software/<name>`; where that root is gone but `software/<name>` is there (an install path
    moved after EasyBuild wrote absolute roots), the latter."""
    mapped = root / "software" / name
    if written is None or not os.path.isabs(written):
        return mapped
    if os.path.lexists(written) or not os.path.lexists(mapped):
        return Path(written)
    log.debug("%s: its root %s is gone, %s is there", name, written, mapped)
    return mapped


def fingerprint_installation(software: Path) -> tuple[Fingerprint | None, Source | None]:
    """The recorded fingerprint of an installation, else one read from it, else none;
    `Unreadable` when the installation or its record cannot be read."""
    _readable_folder(software)
    return fingerprint_of(software, read_record=_recorded, read_files=_installed)


def _installed(software: Path) -> tuple[Fingerprint | None, list[Fingerprint]]:
    """The torch and consumers of an installation; none without Python distributions."""
    try:
        site_packages_of(software)
    except DistributionError:
        log.debug("%s: no Python distributions, no torch", software)
        return None, []
    except OSError as exc:
        raise Unreadable(f"cannot read {str(software)!r}: {exc.strerror or exc}") from exc
    try:
        return installation_fingerprints(software)
    except (TorchstackError, OSError) as exc:
        raise Unreadable(f"cannot fingerprint {str(software)!r}: {exc}") from exc


def _readable_folder(software: Path) -> None:
    """`Unreadable` unless `software` is a folder whose entries can be listed."""
    where = str(software)
    try:
        mode = software.stat().st_mode
        if not stat.S_ISDIR(mode):
            raise Unreadable(f"its installation {where!r} is {_kind(mode)}, not a folder")
        with os.scandir(software):
            pass
    except OSError as exc:
        raise Unreadable(f"its installation folder {_os_problem(where, exc)}") from exc


def _recorded(software: Path) -> Fingerprint | None:
    """The recorded fingerprint; None only when nothing is there (not a FIFO, a folder, a
    symlink loop, a dangling symlink: those and damaged files are `Unreadable`)."""
    path = software / FINGERPRINT_FILE
    where = str(path)
    try:
        info = path.stat()
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.lexists(path):
            return None
        raise Unreadable(f"its recorded fingerprint {_os_problem(where, exc)}") from exc
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FINGERPRINT_BYTES:
        what = (f"is {_kind(info.st_mode)}, not a regular file" if not stat.S_ISREG(info.st_mode)
                else f"is larger than {MAX_FINGERPRINT_BYTES} bytes")  # the hook's bound too
        raise Unreadable(f"its recorded fingerprint {where!r} {what}")
    try:
        return read_fingerprint(software)
    except (RecursionError, ValueError) as exc:  # nested too deeply, JSON syntax, not UTF-8
        raise Unreadable(f"{where!r} is not a fingerprint JSON file: {exc}") from exc
    except (OSError, TorchstackError) as exc:
        raise Unreadable(f"{where!r}: {exc}") from exc


def _os_problem(where: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return f"{where!r} is a symlink loop"
    if exc.errno == errno.ENOENT:
        return f"{where!r} does not exist" + (" (a dangling symlink)"
                                              if os.path.islink(where) else "")
    return f"{where!r} cannot be read: {exc.strerror or exc}"


def _reason(exc: Exception) -> str:
    return (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISREG, "a file"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a device")


def _link_providers(modules: list[InstalledModule], hierarchy: Hierarchy
                    ) -> tuple[InstalledModule, ...]:
    """Each consumer with the provider module it runs on (its C++ release assumed if unknown),
    or why that cannot be told."""
    by_name = {m.name: m for m in modules}
    return tuple(_with_provider(m, by_name, hierarchy) for m in modules)


def _with_provider(
    module: InstalledModule, by_name: dict[str, InstalledModule], hierarchy: Hierarchy,
) -> InstalledModule:
    own = module.fingerprint
    if module.unreadable is None and (own is None or own.role != "consumer"):
        return module
    provider, doubts = _provider_under_each(module, by_name, hierarchy)
    if provider is None or provider.fingerprint is None:
        why = "; ".join(doubts) if doubts else (
            "it loads no PyTorch module: it runs on whichever one is loaded")
        log.debug("%s: no provider module among its loads (%s)", module.name, why)
        if own is None and not doubts:  # unreadable, and loads nothing torch: as before
            return module
        return replace(module, undetermined=why)
    if own is None:  # unknown: the torch it would run on, if it needs one
        return replace(module, runs_on=provider.name)
    if module.source == "scanned":
        own = compat.assume_built_against(provider.fingerprint, own)
    return replace(module, runs_on=provider.name, fingerprint=own)


def _provider_under_each(
    start: InstalledModule, by_name: dict[str, InstalledModule], hierarchy: Hierarchy,
) -> tuple[InstalledModule | None, list[str]]:
    """The nearest provider of `start` under each MODULEPATH it can be loaded under; one
    that differs between them is a doubt, not a provider."""
    found = {path: _nearest_provider(start, by_name, hierarchy, path)
             for path in hierarchy.modulepaths(start.name)}
    names = sorted({p.name if p is not None else "none" for p, _ in found.values()})
    if len(names) > 1:
        ways = "; ".join(f"under MODULEPATH {_shown(path)} on "
                         f"{p.name if p is not None else 'none'}"
                         for path, (p, _) in found.items())
        return None, [f"it runs on {' or '.join(names)} by the toolchain modules loaded "
                      f"before it ({ways})"]
    return next(iter(found.values()))


def _shown(path: Modulepath) -> str:
    return ":".join(level or "modules/all" for level in path)


def _nearest_provider(
    start: InstalledModule, by_name: dict[str, InstalledModule], hierarchy: Hierarchy,
    modulepath: Modulepath,
) -> tuple[InstalledModule | None, list[str]]:
    """Breadth-first through the loads of `start` loaded under `modulepath`: the first
    provider module reached, and what stood in the way of a full walk (loads that name
    nothing, unreadable module files)."""
    seen = {start.name}
    doubts: list[str] = []
    queue = deque(_loads_under(start, hierarchy, modulepath))
    while queue:
        loader, written, found, path = queue.popleft()
        module = by_name.get(found.module) if found.module is not None else None
        if module is None:
            doubts.append(f"{loader.name} loads {found.doubt or repr(written)}")
            continue
        if module.name in seen:
            continue
        seen.add(module.name)
        if module.is_provider:
            log.debug("%s runs on %s (through %r)", start.name, module.name, written)
            return module, doubts
        if module.loads_unknown:
            doubts.append(f"{module.name}: {module.unreadable}")
        queue.extend(_loads_under(module, hierarchy, path))
    return None, doubts


def _loads_under(
    module: InstalledModule, hierarchy: Hierarchy, modulepath: Modulepath,
) -> list[tuple[InstalledModule, str, Resolved, Modulepath]]:
    """Each load of `module` with the module it names, under MODULEPATH as Lmod has it when
    the load runs (what the loads before it added, in the order written)."""
    found = []
    for written in module.dependencies:
        resolved = hierarchy.resolve(written, modulepath)
        found.append((module, written, resolved, modulepath))
        if resolved.module is not None:
            modulepath = hierarchy.after_load(resolved.module, modulepath)
    return found


def record_scanned(scan: Scan) -> list[InstalledModule]:
    """Write the fingerprint of every module that had none recorded (modules that predate
    torchstack), as the hooks file would have: the SitePackage.lua hook reads these files.
    A consumer is recorded only once the provider it runs on is known, since an extension
    whose metadata names no torch release is taken as built against that provider's torch.
    A consumer's record without guard clauses (written before they were recorded) is written
    again with them."""
    recorded = []
    for module in scan.modules:
        if module.fingerprint is None or not (module.source == "scanned" or _stale(module)):
            continue
        if module.source == "scanned" and module.is_consumer and module.runs_on is None:
            log.warning("%s: no PyTorch module among its loads; not recorded", module.name)
            continue
        write_fingerprint(module.software, module.fingerprint)
        recorded.append(module)
    return recorded


def _stale(module: InstalledModule) -> bool:
    """A recorded consumer fingerprint that lacks the guard clauses the SitePackage hook needs."""
    found = module.fingerprint
    return (module.source == "recorded" and found is not None and found.role == "consumer"
            and found.guard_clauses is None)


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
    unknown = [NotChecked(m.name, m.unreadable or m.undetermined or "")
               for m in scan.unknown_on(old.name)]
    unknown += [NotChecked(folder, f"its module files {why}") for folder, why in scan.problems]
    return SwapReport(old, new, tuple(breaking), tuple(safe), tuple(unknown))


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
    if module.unreadable is not None:
        return f"{label} module {name!r} cannot be checked: {module.unreadable}"
    if module.fingerprint is None:
        return f"{label} module {name!r} has no torch fingerprint, it is not a torch provider"
    if not module.is_provider:
        return (f"{label} module {name!r} is a {module.role} "
                f"({module.fingerprint.abi_tag}), not a torch provider")
    return None


def _tag(module: InstalledModule) -> str | None:
    return module.fingerprint.abi_tag if module.fingerprint is not None else None
