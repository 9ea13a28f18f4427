"""Toolchain data from the EasyBuild robot path: foss/2025a -> Python, SciPy-bundle, CUDA, ...

Everything comes from EasyBuild itself: the subtoolchain hierarchy from
`get_toolchain_hierarchy`, the facts of each easyconfig (version, versionsuffix, toolchain,
extensions) from EasyBuild's parser with templates resolved. File names only choose which
files to parse, following EasyBuild's naming convention name-version[-toolchain]suffix.eb.

A broken easyconfig file met while searching (one that needs a newer EasyBuild, say) is skipped
with a debug log: one bad file among thousands must not stop a search whose answer is elsewhere.
A broken toolchain easyconfig, or a broken file asked for by path, raises ToolchainError.

Per process, parsed files are cached by path, size and modification time, and the list of a
robot path's files for a name is read once.
"""

from __future__ import annotations

import functools
import logging
import os
import site
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from torchstack.errors import TorchstackError
from torchstack.generator import _ebconfig
from torchstack.generator._ebconfig import SYSTEM, EasyBuildError, EasyconfigFacts

__all__ = ["Dependency", "Toolchain", "ToolchainError", "default_robot_paths", "easyblock_of",
           "load_toolchain", "namesakes", "provided_packages", "source_easyconfig",
           "versions_of"]

log = logging.getLogger(__name__)


class ToolchainError(TorchstackError):
    """A toolchain that the robot path does not define, or lacks what is asked of it."""


# How upstream easyconfigs name the system toolchain in a dependency tuple.
SYSTEM_TOOLCHAIN = {"name": "system", "version": "system"}


@dataclass(frozen=True)
class Dependency:
    """One easyconfig of the robot path, as a dependency of an easyconfig would name it."""

    name: str
    version: str
    versionsuffix: str
    toolchain: tuple[str, str]  # ('GCCcore', '14.2.0'), ('system', 'system')
    path: str  # the easyconfig file it was read from

    def as_easyconfig_tuple(self, parent: tuple[str, str]) -> tuple[str | dict[str, str], ...]:
        """As upstream writes it in `dependencies` of a `parent`-toolchain easyconfig.

        ('Python', '3.13.1'), ('cuDNN', '9.10.1.4', '-CUDA-12.8.0', SYSTEM) or
        ('NCCL', '2.26.6', '-CUDA-12.8.0'): EasyBuild finds subtoolchains on its own, except
        the system toolchain, which has to be named.
        """
        if self.toolchain == SYSTEM and parent != SYSTEM:
            return (self.name, self.version, self.versionsuffix, dict(SYSTEM_TOOLCHAIN))
        if self.versionsuffix:
            return (self.name, self.version, self.versionsuffix)
        return (self.name, self.version)


@dataclass(frozen=True)
class Toolchain:
    """A toolchain of the robot path and the subtoolchains EasyBuild derives for it."""

    name: str
    version: str
    hierarchy: tuple[tuple[str, str], ...]  # itself first, down to ('system', 'system')
    robot_paths: tuple[str, ...]

    @property
    def spec(self) -> str:
        return f"{self.name}/{self.version}"

    def find(self, name: str, *, versionsuffix: str = "",
             version_prefix: str = "") -> Dependency | None:
        """The newest easyconfig of `name` built with this toolchain or a subtoolchain.

        `versionsuffix` must match exactly ('' excludes -bare and -CUDA-... variants);
        `version_prefix` '12.8' selects 12.8 and 12.8.x. Of equal versions, the one nearest
        this toolchain wins.
        """
        return _newest(self, name, versionsuffix, version_prefix)

    def every(self, name: str) -> list[Dependency]:
        """Every easyconfig of `name` for this toolchain and its subtoolchains, nearest first."""
        return [Dependency(f.name, f.version, f.versionsuffix, f.toolchain, f.path)
                for f in _facts_of(self, name)]

    def placement(self, name: str) -> tuple[str, str]:
        """The toolchain of the hierarchy that upstream builds `name` with (that of its newest
        easyconfig here: Triton on gfbf for foss), or this toolchain when it has none."""
        found = self.every(name)
        if not found:
            return (self.name, self.version)
        newest = found[0]
        for candidate in found[1:]:
            if _ebconfig.compare_versions(candidate.version, newest.version) > 0:
                newest = candidate
        return newest.toolchain

    @property
    def python(self) -> Dependency:
        """The Python of this toolchain; ToolchainError when the robot path has none."""
        found = self.find("Python")
        if found is None:
            raise ToolchainError(f"no Python easyconfig for toolchain {self.spec!r} or its "
                                 f"subtoolchains in the robot path {list(self.robot_paths)!r}")
        return found


def default_robot_paths() -> list[str]:
    """The easyconfigs folder of the installed easybuild-easyconfigs: pip puts it in Python's
    prefix as easybuild/easyconfigs (in the user base with --user). The folders of sys.path
    that EasyBuild also tries are left out: they include the working folder."""
    prefixes = [sys.prefix, sys.base_prefix, site.getuserbase()]
    found: list[str] = []
    for prefix in prefixes:
        folder = os.path.abspath(os.path.join(prefix, "easybuild", "easyconfigs"))
        if os.path.isdir(folder) and folder not in found:
            found.append(folder)
    return found


def load_toolchain(spec: str, robot_paths: Sequence[str] | None = None) -> Toolchain:
    """The toolchain `spec` ('foss/2025a' or 'foss-2025a') as the robot path defines it."""
    name, version = _split_spec(spec)
    paths = _robot_paths(robot_paths)
    hierarchy = _hierarchy(name, version, paths)
    log.debug("toolchain %s/%s: hierarchy %s from robot path %s", name, version, hierarchy, paths)
    return Toolchain(name, version, hierarchy, paths)


def source_easyconfig(name: str, version: str, toolchain: Toolchain,
                      versionsuffix: str = "") -> Path | None:
    """The robot path's easyconfig of exactly name/version/versionsuffix for `toolchain`
    (or, failing that, for the nearest subtoolchain that has one); None when there is none."""
    for facts in _facts_of(toolchain, name):
        if (facts.name, facts.version, facts.versionsuffix) == (name, version, versionsuffix):
            log.debug("source easyconfig of %s %s%s for %s: %s", name, version, versionsuffix,
                      toolchain.spec, facts.path)
            return Path(facts.path)
    return None


def versions_of(name: str, robot_paths: Sequence[str] | None = None) -> list[str]:
    """The versions of toolchain `name` (foss) that the robot path defines, newest first."""
    found: set[str] = set()
    for robot_path in _robot_paths(robot_paths):
        for path in _ebconfig.candidate_files(robot_path, name):
            stem = os.path.basename(path)[:-len(".eb")]
            if stem.startswith(f"{name}-") and "-" not in stem[len(name) + 1:]:
                found.add(stem[len(name) + 1:])
    return sorted(found, key=functools.cmp_to_key(_ebconfig.compare_versions), reverse=True)


def namesakes(filename: str, name: str, robot_paths: Sequence[str]) -> list[EasyconfigFacts]:
    """The easyconfigs of the robot path called `filename`, parsed: files that a generated
    one of that name shadows (or is shadowed by)."""
    paths = _robot_paths(robot_paths)
    found = [path for robot_path in paths for path in _ebconfig.candidate_files(robot_path, name)
             if os.path.basename(path) == filename]
    return _parse_all(paths, found)


def provided_packages(dependency: Dependency) -> dict[str, str]:
    """The Python packages a module provides (canonical name -> version): itself and the
    extensions of its easyconfig, e.g. numpy, scipy and pandas for SciPy-bundle."""
    facts = _parse_path(dependency.path)
    packages: dict[str, str] = {canonicalize_name(facts.name): facts.version}
    packages.update((canonicalize_name(ext), ver) for ext, ver in facts.extensions)
    return packages


def easyblock_of(path: str | Path) -> str | None:
    """The easyblock an easyconfig file names; None when it leaves EasyBuild to derive it."""
    return _parse_path(str(path)).easyblock


def _split_spec(spec: str) -> tuple[str, str]:
    if spec.strip().lower() == "system":
        return SYSTEM
    name, sep, version = spec.partition("/")
    if not sep:
        name, _, version = spec.rpartition("-")
    if not name or not version or "/" in version or any(c.isspace() for c in spec):
        raise ToolchainError(f"toolchain {spec!r} is not of the form NAME/VERSION "
                             f"(foss/2025a) or NAME-VERSION (foss-2025a)")
    return name, version


def _robot_paths(robot_paths: Sequence[str] | None) -> tuple[str, ...]:
    if isinstance(robot_paths, str):
        robot_paths = robot_paths.split(os.pathsep)
    paths = tuple(os.path.abspath(p) for p in (default_robot_paths() if robot_paths is None
                                                 else robot_paths) if p)
    if not paths:
        raise ToolchainError("no robot path: install easybuild-easyconfigs or name the "
                             "easyconfig folders (--robot-paths)")
    missing = [p for p in paths if not os.path.isdir(p)]
    if missing:
        raise ToolchainError(f"robot path folders {missing!r} do not exist")
    return paths


@functools.lru_cache(maxsize=64)
def _hierarchy(name: str, version: str, paths: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    if (name, version) == SYSTEM:
        return (SYSTEM,)
    with _ebconfig.session(paths):
        if name not in _ebconfig.toolchain_names():
            raise ToolchainError(f"{name!r} is not an EasyBuild toolchain (toolchain "
                                 f"{name + '/' + version!r} asked of robot path {list(paths)!r})")
        if _ebconfig.find_easyconfig(name, version) is None:
            raise ToolchainError(f"toolchain {name + '/' + version!r} is not in the robot "
                                 f"path {list(paths)!r}")
        try:
            return _ebconfig.toolchain_hierarchy(name, version)
        except EasyBuildError as err:
            raise ToolchainError(f"toolchain {name + '/' + version!r} in robot path "
                                 f"{list(paths)!r}: {err.msg}") from err


def _newest(toolchain: Toolchain, name: str, versionsuffix: str,
            version_prefix: str) -> Dependency | None:
    best: EasyconfigFacts | None = None
    for facts in _facts_of(toolchain, name):
        if facts.versionsuffix != versionsuffix or not _has_prefix(facts.version,
                                                                   version_prefix):
            continue
        # _facts_of yields nearer toolchains first, so only a strictly newer version wins.
        if best is None or _ebconfig.compare_versions(facts.version, best.version) > 0:
            best = facts
    if best is None:
        log.debug("%s%s %s*: none for %s", name, versionsuffix, version_prefix, toolchain.spec)
        return None
    log.debug("%s for %s: %s", name, toolchain.spec, best.path)
    return Dependency(best.name, best.version, best.versionsuffix, best.toolchain, best.path)


def _has_prefix(version: str, prefix: str) -> bool:
    if not prefix:
        return True
    return version == prefix.rstrip(".") or version.startswith(prefix.rstrip(".") + ".")


def _facts_of(toolchain: Toolchain, name: str) -> list[EasyconfigFacts]:
    """Parsed easyconfigs of `name` for the hierarchy, nearest toolchain first."""
    rank = {tc: i for i, tc in enumerate(toolchain.hierarchy)}
    files = _candidates(toolchain.robot_paths, name, toolchain.hierarchy)
    found = [facts for facts in _parse_all(toolchain.robot_paths, files)
             if facts.name == name and facts.toolchain in rank]
    return sorted(found, key=lambda facts: rank[facts.toolchain])


def _parse_all(paths: tuple[str, ...], files: Iterable[str]) -> list[EasyconfigFacts]:
    parsed = []
    with _ebconfig.session(paths):
        for path in files:
            try:
                parsed.append(_ebconfig.parse(path))
            except EasyBuildError as err:
                log.debug("skipping %s: EasyBuild cannot parse it: %s", path, err.msg)
    return parsed


def _parse_path(path: str) -> EasyconfigFacts:
    if not os.path.isfile(path):
        raise ToolchainError(f"easyconfig {path!r} does not exist")
    with _ebconfig.session():
        try:
            return _ebconfig.parse(path)
        except EasyBuildError as err:
            raise ToolchainError(f"easyconfig {path!r} cannot be parsed: {err.msg}") from err


@functools.lru_cache(maxsize=1024)
def _candidates(paths: tuple[str, ...], name: str,
                hierarchy: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """Files of `name` whose file name allows one of the hierarchy's toolchains.

    A toolchain other than system shows as -NAME-VERSION in the file name; a file that shows
    no toolchain may be a system one. An earlier robot path shadows a file of the same name.
    """
    markers = [f"-{tc}-{ver}" for tc, ver in hierarchy if (tc, ver) != SYSTEM]
    foreign = [f"-{tc}-" for tc in _ebconfig.toolchain_names()]
    chosen: dict[str, str] = {}
    for robot_path in paths:
        for path in _ebconfig.candidate_files(robot_path, name):
            stem = os.path.basename(path)[:-len(".eb")]
            rest = stem[len(name):] if stem.startswith(name) else stem
            fits = any(m in rest for m in markers) or (
                SYSTEM in hierarchy and not any(f in rest for f in foreign))
            if fits:
                chosen.setdefault(os.path.basename(path), path)
    return tuple(chosen.values())
