"""The requirements of a wheel set, split into toolchain modules and extension wheels.

A requirement that a module of the toolchain satisfies (its own package or one of its
extensions, in a version the specifier accepts) becomes a dependency on that module; every
other one becomes an extension wheel from the index, resolved greedily, newest first, with
its own requirements in turn. Each extension costs one metadata read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torchstack.generator import render, toolchains
from torchstack.generator.release import Resolved, Resolver, Target

log = logging.getLogger(__name__)

# Toolchain modules whose Python packages may satisfy requirements, in dependency order.
PROVIDER_MODULES = ("Python", "Python-bundle-PyPI", "SciPy-bundle", "networkx", "mpmath", "sympy",
                    "Jinja2", "PyYAML", "Pillow")


@dataclass(frozen=True)
class Provider:
    """A module of the toolchain and the Python packages it provides (name -> version)."""

    module: str
    packages: Mapping[str, str]
    dependency: str = ""  # how an easyconfig names it: ('Python', '3.13.1')

    def satisfies(self, requirement: Requirement) -> bool:
        version = self.packages.get(canonicalize_name(requirement.name))
        if version is None:
            return False
        try:
            return requirement.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            return not str(requirement.specifier)


def module_providers(toolchain: toolchains.Toolchain) -> list[Provider]:
    """The PROVIDER_MODULES the robot path has for `toolchain`, with their packages."""
    providers = []
    for name in PROVIDER_MODULES:
        module = toolchain.find(name)
        if module is not None:
            providers.append(Provider(name, toolchains.provided_packages(module),
                                      render.module_dependency(module)))
    return providers


@dataclass(frozen=True)
class Closure:
    """Modules used (in the order given), extension wheels (dependencies first), notes, and
    the requirements that neither a module nor an index can meet."""

    modules: tuple[str, ...]
    extensions: tuple[Resolved, ...]
    notes: tuple[str, ...]
    unmet: tuple[str, ...] = ()


@dataclass
class _Walk:
    modules: list[str] = field(default_factory=list)
    chosen: dict[str, Resolved] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unmet: list[str] = field(default_factory=list)


def close(
    roots: Iterable[Requirement], targets: Sequence[Target], providers: Sequence[Provider],
    resolver: Resolver, exclude: Iterable[str] = (),
) -> Closure:
    """Split `roots` (and what their extension wheels require) into modules and wheels,
    found on the resolver's indexes, the first that has a fitting version winning.

    `exclude` names projects handled elsewhere (torch itself, triton in its own module,
    CUDA libraries that modules provide).
    """
    excluded = {canonicalize_name(name) for name in exclude}
    walk = _Walk()
    pending = [(requirement, "") for requirement in roots]
    while pending:
        requirement, wanted_by = pending.pop(0)
        name = canonicalize_name(requirement.name)
        if name in excluded:
            continue
        provider = next((p for p in providers if p.satisfies(requirement)), None)
        if provider is not None:
            if provider.module not in walk.modules:
                walk.modules.append(provider.module)
            continue
        resolved = _extension(requirement, wanted_by, walk, targets, resolver)
        if resolved is not None:
            pending.extend((r, name) for r in _needs(resolved, targets, requirement.extras))
    order = {module: i for i, module in enumerate(p.module for p in providers)}
    modules = sorted(walk.modules, key=lambda m: order[m])
    # dependencies before their dependants: reverse discovery order keeps that for trees
    extensions = tuple(walk.chosen[n] for n in reversed(walk.order))
    return Closure(tuple(modules), extensions, tuple(walk.notes), tuple(walk.unmet))


def _extension(requirement: Requirement, wanted_by: str, walk: _Walk,
               targets: Sequence[Target], resolver: Resolver) -> Resolved | None:
    name = canonicalize_name(requirement.name)
    if name in walk.chosen:
        have = Version(walk.chosen[name].version)
        if not requirement.specifier.contains(have, prereleases=True):
            walk.notes.append(f"{wanted_by or 'the set'} requires {requirement}, "
                              f"but {name} {have} was chosen for another requirement")
        if requirement.extras:  # extras add requirements of a wheel already chosen
            return walk.chosen[name]
        return None
    for index in resolver.indexes:
        for version, wheels in resolver.versions(index, name, list(targets), None, False):
            if requirement.specifier.contains(version, prereleases=True):
                file = next(iter(wheels.values()))
                resolved = Resolved(name, str(version), wheels,
                                    resolver.requires_dist(index, file), index.location)
                walk.chosen[name] = resolved
                walk.order.append(name)
                log.debug("%s -> extension %s %s from %s", requirement, name, version,
                          index.location)
                return resolved
    walk.unmet.append(f"{requirement} (wanted by {wanted_by or 'the set'}): no module of the "
                      f"toolchain provides it and no index has wheels for "
                      f"{', '.join(t.arch for t in targets)}")
    return None


def _needs(resolved: Resolved, targets: Sequence[Target],
           extras: Iterable[str]) -> list[Requirement]:
    wanted = ("", *sorted(extras))
    seen: dict[str, Requirement] = {}
    for target in targets:
        for requirement in resolved.requirements(target, wanted):
            seen.setdefault(str(requirement), requirement)
    return list(seen.values())
