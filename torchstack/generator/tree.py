"""The easyconfigs tree that torchstack ships: the newest releases of the embedded catalog for
the newest foss toolchains of the robot path that fit them, in easybuild-easyconfigs' layout.

Each release is planned as `generate --offline` plans it (`plan.newest_toolchain`, with the
release in the easystack names so that the sets of several releases share one folder), and
each file goes where upstream keeps it: `p/PyTorch/PyTorch-2.15.0-foss-2026.1-CUDA-13.2.0-
whl.eb`, `t/Triton/...`, the easystacks at the top. `eb --robot=TREE` then finds every file,
and an easystack builds its set from the top of the tree as the one of a generated folder does
(`--robot="$PWD"`). A README.rst says what the tree holds and where its answers come from.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.version import Version

from torchstack.errors import TorchstackError
from torchstack.generator import plan, recording, release, toolchains
from torchstack.index import catalog, defaults
from torchstack.output import staging_path

log = logging.getLogger(__name__)

MINORS = 2  # the newest release of each of the two newest minor series (2.15.0, 2.14.1)
TOOLCHAINS = 2  # the two newest toolchains of the family that each release fits
FAMILY = "foss"
README = "README.rst"
# The tree is installed as the package data torchstack.easyconfigs; the package needs one.
INIT = "__init__.py"
_INIT_TEXT = '"""The easyconfigs torchstack ships, as package data: eb reads only the *.eb."""\n'


class TreeError(TorchstackError):
    """A tree that cannot be planned, or a folder that cannot take one."""


@dataclass(frozen=True)
class Release:
    """What the tree holds of one release, and where its answers come from."""

    release: str
    toolchains: tuple[str, ...]
    sets: tuple[str, ...]  # "foss/2026.1 cu132: aarch64, x86_64"
    easystacks: tuple[str, ...]
    sources: tuple[str, ...]  # the catalog's lines: "answers of URL recorded DATE", ...
    skipped: tuple[str, ...]  # what of the release was not written, with why


@dataclass(frozen=True)
class Tree:
    """The tree's files (path inside the tree -> text) and what each release contributes."""

    files: dict[str, str]
    releases: tuple[Release, ...]


def newest_minors(releases: Iterable[str], count: int = MINORS) -> list[str]:
    """The newest release of each of the `count` newest minor series, newest first."""
    newest: dict[tuple[int, ...], Version] = {}
    for text in releases:
        version = Version(text)
        series = version.release[:2]
        if series not in newest or version > newest[series]:
            newest[series] = version
    return [str(v) for v in sorted(newest.values(), reverse=True)[:count]]


def tree_path(filename: str, name: str) -> str:
    """Where easybuild-easyconfigs keeps easyconfig `filename` of software `name`:
    p/PyTorch/PyTorch-2.15.0-foss-2026.1-CUDA-13.2.0-whl.eb."""
    return f"{name[0].lower()}/{name}/{filename}"


def build(catalog_folder: Path | None = None,
          robot_paths: Sequence[str] | None = None) -> Tree:
    """Plan the whole tree from the catalog (None: the shipped one); no network."""
    versions = toolchains.versions_of(FAMILY, robot_paths)
    candidates = [f"{FAMILY}/{version}" for version in versions]
    files: dict[str, str] = {INIT: _INIT_TEXT}
    planned = []
    for version in newest_minors(catalog.releases(catalog_folder)):
        indexes, sources = defaults.offline(version, catalog_folder)
        settings = plan.Settings(release=version, toolchains=(),
                                 robot_paths=tuple(robot_paths) if robot_paths else None,
                                 release_in_easystack_names=True)
        result = plan.newest_toolchain(settings, indexes, candidates, count=TOOLCHAINS)
        for path, text in _placed(result).items():
            if files.get(path, text) != text:
                raise TreeError(f"{path} would differ between the releases of the tree")
            files[path] = text
        planned.append(_release(version, result, sources))
    if not planned:
        raise TreeError("the catalog holds no release")
    files[README] = readme(planned)
    return Tree(files, tuple(planned))


def refresh(catalog_folder: Path, indexes: Sequence[str] | None,
            record_for: Sequence[str], robot_paths: Sequence[str] | None = None) -> list[str]:
    """Record in the catalog the releases the tree takes from the indexes as they are now
    (the newest of each of the newest minor series); returns them, newest first."""
    wanted = newest_minors(release.final_releases(defaults.online(indexes)))
    for version in wanted:
        path = recording.record(version, catalog_folder, indexes, record_for, robot_paths)
        log.debug("recorded torch %s in %s", version, path)
    return wanted


def _placed(result: plan.Generated) -> dict[str, str]:
    """The files of a generated set at their places in the tree."""
    placed = {}
    for easyconfig in result.easyconfigs:
        name = easyconfig.module.rsplit("-", 1)[0]  # PyTorch-2.15.0: versions hold no '-'
        placed[tree_path(easyconfig.filename, name)] = easyconfig.text
    placed.update(result.easystacks)
    return placed


def _release(version: str, result: plan.Generated, sources: Sequence[str]) -> Release:
    sets = tuple(_set_line(s) for s in result.sets if s.easystacks)
    used = tuple(dict.fromkeys(s.toolchain for s in result.sets if s.easystacks))
    skipped = tuple(plan.skipped_line(s, why) for s in result.sets for why in s.skipped)
    return Release(version, used, sets, tuple(sorted(result.easystacks)),
                   tuple(line.removeprefix("offline: ") for line in sources), skipped)


def _set_line(planned: plan.PlannedSet) -> str:
    """'foss/2025b cu132: PyTorch-2.15.0, ...; easystack-...-aarch64.yaml, ...'."""
    modules = ", ".join(p.module for p in planned.easyconfigs)
    return f"{planned.label}: {modules}; {', '.join(sorted(planned.easystacks.values()))}"


def readme(releases: Sequence[Release]) -> str:
    """The tree's README.rst: what it holds, where from, and how to build a set."""
    lines = [
        "torchstack easyconfigs", "======================", "",
        "Written by ``torchstack easyconfigs regenerate`` from torchstack's catalog of index",
        "answers: regenerate it rather than edit it. Installed with torchstack, this folder is",
        "``torchstack easyconfigs-path``. Build a set in this folder with one of the easystacks",
        "below (``torchstack easyconfigs list`` prints each command)::", "",
        f"   {plan.build_command('EASYSTACK')}", "",
    ]
    for found in releases:
        title = f"torch {found.release}"
        lines += [title, "-" * len(title), ""]
        lines += [f"- {line}" for line in (*found.sources, *found.skipped, *found.sets)]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def write(folder: Path, files: Mapping[str, str]) -> None:
    """Replace the tree at `folder` by `files` at once: written into a sibling folder that is
    then renamed into place. A folder that holds anything but a tree's files is refused."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise TreeError(f"{str(folder)!r} is not a folder")
    if folder.is_dir():
        foreign = sorted(str(p) for p in _contents(folder) if not _tree_shaped(p))
        if foreign:
            raise TreeError(f"{str(folder)!r} holds files that belong to no easyconfigs tree "
                            f"({', '.join(foreign[:3])}): not replaced")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(folder)
    old = staging.with_name(staging.name + ".old")
    staging.mkdir()  # as mkdir makes a folder: umask, the parent's setgid group
    try:
        for relative, text in sorted(files.items()):
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
        if folder.is_dir():
            folder.rename(old)
        staging.rename(folder)
    except BaseException:
        if old.is_dir() and not folder.exists():  # interrupted between the two renames
            old.rename(folder)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _contents(folder: Path) -> list[PurePosixPath]:
    return [PurePosixPath(p.relative_to(folder).as_posix()) for p in folder.rglob("*")
            if not p.is_dir() or p.is_symlink()]


def _tree_shaped(path: PurePosixPath) -> bool:
    """A file that a tree holds: its README, package file, an easystack at the top, an
    easyconfig at l/Name/, or what Python caches of the package."""
    if "__pycache__" in path.parts:
        return True
    if len(path.parts) == 1:
        return path.name in (README, INIT) or (path.name.startswith("easystack-")
                                                 and path.suffix == ".yaml")
    letter, name = path.parts[0], path.parts[1]
    return (len(path.parts) == 3 and path.suffix == ".eb" and letter == name[0].lower())
