"""Module defaults that point `module load NAME` at one stack, in the syntax of the module tree.

A module's rc file lives in the folder of its module file: `modules/all/PyTorch` for
EasyBuild's flat names, `modules/all/Core/PyTorch` or `modules/all/MPI/GCC/14.2.0/OpenMPI/5.0.7/
PyTorch` for HierarchicalMNS, plus the `modules/<class>/...` folders EasyBuild links into.
There Lmod knows the module by the folder's name and the file's (`PyTorch/2.6.0`), as every
EasyBuild naming scheme writes them; each folder gets its own default.

A Lua module file gets Lmod's `.modulerc.lua`, a Tcl one `.modulerc` (read by Lmod and
Environment Modules alike); a Tcl default also goes into a `.modulerc.lua` the folder already
has, since Lmod reads only the first rc file it finds, and torchstack's stale block in the
other rc file is removed. Where no module file has the release as its version, an alias
(`PyTorch/2.6.0` for `PyTorch/2.6.0-foss-2024a`) makes `module load PyTorch/2.6.0` follow.
Every name is quoted by `lua_string` or `tcl_string`: a module name is never code.

torchstack owns one marked block of each file, tagged with the pair FROM -> TO, and replaces
only that; a block of the same pair in a folder the run does not write (a hierarchical tree
where FROM and TO live at different levels) is removed. A default the site set itself in a
folder (`default`, `.version`, lines outside the block) competes with ours: it is refused,
naming the file, and nothing is written. All files are written or none (`_commit`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchstack.guards.lua import lua_string
from torchstack.guards.moduletree import RC_FILES
from torchstack.guards.scan import Scan
from torchstack.guards.tcl import tcl_string
from torchstack.rollout import _commit
from torchstack.rollout._rcfiles import (
    BEGIN_LINE,
    END,
    PAIR,
    RcFileError,
    RcText,
    competing,
    read_rc,
)
from torchstack.rollout.plan import Plan, ReadRecipe, RolloutError
from torchstack.rollout.recipes import RecipeError, installed_recipe

log = logging.getLogger(__name__)

__all__ = ["RC_FILES", "Default", "module_folders", "promoted", "rolled_back", "write_defaults"]


@dataclass(frozen=True)
class Default:
    """One module (its full name below modules/all) to be the default of its folder, and the
    release name that resolves to it."""

    module: str
    release: str | None = None


def promoted(plan: Plan) -> list[Default]:
    """The source stack: TO and each consumer's installation on TO."""
    found = [Default(plan.target.name, plan.target_recipe.version)]
    found += [Default(s.target, s.on_target.version if s.on_target else None)
              for s in plan.steps if s.target is not None]
    return _one_per_folder(found)


def rolled_back(scan: Scan, source: str,
                read_recipe: ReadRecipe = installed_recipe) -> list[Default]:
    """The wheel stack: FROM and each consumer that runs on it. Needs FROM only: TO may be
    gone or damaged, rollback is what a site does then."""
    module = scan.get(source)
    if module is None:
        raise RolloutError(f"FROM module {source!r} is not installed in "
                           f"{str(scan.installpath)!r}")
    if module.unreadable is not None:
        raise RolloutError(f"FROM module {source!r} cannot be checked: {module.unreadable}")
    if not module.is_provider:
        raise RolloutError(f"FROM module {source!r} is a {module.role}, not a torch provider")
    found = [Default(m.name, _release(m.software, read_recipe))
             for m in (module, *scan.consumers_of(source))]
    return _one_per_folder(found)


def write_defaults(installpath: Path, defaults: Sequence[Default],
                   pair: tuple[str, str] | None = None) -> list[Path]:
    """Write the defaults into every module folder of each, all or nothing; every folder and
    site default checked first. Returns the files written or removed."""
    modules = installpath / "modules"
    with _commit.locked(modules):
        places = [(folder, syntax, d) for d in _one_per_folder(defaults)
                  for folder, syntax in module_folders(installpath, d.module)]
        for folder in dict.fromkeys(f for f, _, _ in places):
            for stale in _commit.clean_staging(folder):
                log.info("removed %s, left by an interrupted run", stale)
        tag = json.dumps(list(pair)) if pair else ""
        changes, problems = [], []
        for folder, syntax, default in places:
            try:
                problems += competing(folder)
                changes += _folder_changes(folder, syntax, default, tag)
            except RcFileError as exc:
                problems.append(str(exc))
        if problems:
            raise RolloutError("; ".join(problems) + "; nothing was written")
        if tag:
            changes += _stale_blocks(modules, {f for f, _, _ in places}, tag)
        _commit.commit(changes)
    return [c.path for c in changes]


def module_folders(installpath: Path, module: str) -> list[tuple[Path, str]]:
    """(folder, "lua" or "tcl") of each module folder that holds `module`'s file."""
    where, _, version = module.rpartition("/")
    found = []
    try:
        classes = sorted(p for p in (installpath / "modules").iterdir() if p.is_dir())
    except OSError as exc:
        raise RolloutError(f"cannot read {str(installpath / 'modules')!r}: "
                           f"{exc.strerror or exc}") from exc
    for top in classes:
        folder = top / where
        if where and (folder / f"{version}.lua").is_file():
            found.append((folder, "lua"))
        elif where and (folder / version).is_file():
            found.append((folder, "tcl"))
    if not found:
        raise RolloutError(f"no module file of {module!r} in {str(installpath / 'modules')!r}")
    return found


def block(syntax: str, default: Default, folder: Path, tag: str = "") -> list[str]:
    """The lines of torchstack's block for one module folder."""
    version = default.module.rpartition("/")[2]
    name = f"{folder.name}/{version}"  # as Lmod names it, below the folder's module path
    versions = ["default"]
    release = default.release
    if release and release != version and not _has_version(folder, release):
        versions.append(release)
    comment = "--" if syntax == "lua" else "#"
    head = [f"{comment} {BEGIN_LINE}", *([f"{comment} {PAIR} {tag}"] if tag else [])]
    if syntax == "lua":
        body = [f"module_version({lua_string(name)}, {lua_string(v)})" for v in versions]
    else:
        body = [f"module-version {tcl_string(name)} {tcl_string(v)}" for v in versions]
    return [*head, *body, f"{comment} {END}"]


def merged(rc: RcText, lines: list[str]) -> str | None:
    """The file's text with torchstack's block replaced by `lines` (added if none); None when
    nothing but torchstack's block was in it and `lines` is empty."""
    kept = list(rc.kept)
    if not lines and not any(line.strip() and line.strip() != "#%Module" for line in kept):
        return None
    if rc.path.name == RC_FILES["tcl"] and not (kept and kept[0].startswith("#%Module")):
        kept.insert(0, "#%Module")
    return "\n".join([*kept, *lines]) + "\n"


def _folder_changes(folder: Path, syntax: str, default: Default,
                    tag: str) -> list[_commit.Change]:
    """The folder's rc file of `syntax` with the block; the other one made to agree."""
    own = read_rc(folder / RC_FILES[syntax])
    changes = [_commit.Change(own.path, merged(own, block(syntax, default, folder, tag)))]
    other_syntax = "lua" if syntax == "tcl" else "tcl"
    other = read_rc(folder / RC_FILES[other_syntax])
    if syntax == "tcl" and other.exists:  # Lmod reads .modulerc.lua before .modulerc
        changes.append(_commit.Change(other.path,
                                      merged(other, block("lua", default, folder, tag))))
    elif other.pairs:  # torchstack's stale block there would still win, or mislead
        changes.append(_commit.Change(other.path, merged(other, [])))
    return changes


def _stale_blocks(modules: Path, written: set[Path], tag: str) -> list[_commit.Change]:
    """Blocks of this pair in folders the run does not write: removed."""
    changes = []
    for root, dirs, files in os.walk(modules):
        dirs.sort()
        folder = Path(root)
        for name in sorted(set(files) & set(RC_FILES.values())):
            if folder in written:
                continue
            try:
                rc = read_rc(folder / name)
            except RcFileError as exc:
                log.warning("not checked for torchstack's blocks: %s", exc)
                continue
            if tag in rc.pairs:
                changes.append(_commit.Change(rc.path, merged(rc, [])))
    return changes


def _release(software: Path, read_recipe: ReadRecipe) -> str | None:
    try:
        return read_recipe(software).version
    except RecipeError as exc:
        log.debug("%s: no release alias: %s", software, exc)
        return None


def _has_version(folder: Path, version: str) -> bool:
    return (folder / f"{version}.lua").exists() or (folder / version).exists()


def _one_per_folder(defaults: Iterable[Default]) -> list[Default]:
    """The last default given for each module folder (a folder has one default)."""
    by_folder = {d.module.rpartition("/")[0]: d for d in defaults}
    return list(by_folder.values())
