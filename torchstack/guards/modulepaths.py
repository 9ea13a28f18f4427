"""The module paths of a hierarchical module tree, and the MODULEPATH a module is loaded under
(docs/design.rst, "How Lmod resolves a load").

EasyBuild's HierarchicalMNS spreads `modules/all` over module paths: `Core` (the top, which a
user's MODULEPATH holds), `Compiler/GCC/13.2.0` (added to MODULEPATH by the GCC/13.2.0
module), `MPI/GCC/13.2.0/OpenMPI/4.1.6` (added by OpenMPI/4.1.6 of the Compiler level). Lmod
knows a module by its name below its module path (`PyTorch/2.6.0`), and module files load each
other by that name: `depends_on("PyTorch/2.6.0")` names a module only under the right
MODULEPATH.

The levels of a tree: `modules/all` itself (a flat tree), `Core` (HierarchicalMNS's top, its
`det_init_modulepaths`) when it is a folder, every folder of the tree that a module file adds
to MODULEPATH (`moduleloads.ModuleFacts`), and the module path of each module that adds one
(the folder above its `name/version`, as EasyBuild names toolchain modules). A module belongs
to the deepest level that holds it.

The MODULEPATH of a level: the level alone when no module of the tree adds it (a top);
else, for each module that adds it, itself or through its loads (GCC/13.2.0 loads
GCCcore/13.2.0), the MODULEPATH after that module is loaded under its own level's: its loads
first (each with what it adds), then its own additions in front, as EasyBuild writes loads
before `prepend_path("MODULEPATH", ...)`. A level reached through several modules has several
MODULEPATHs.

Resolving a load under a MODULEPATH follows Lmod 8.6 (LocationT, `LMOD_TMOD_FIND_FIRST=no`):
the trees of its module paths merged, a name found in several taken from the first that holds
it unless a later one marks it as its default; a default is the highest marked version, else
the highest version, among all of them (`moduletree` for one tree).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from torchstack.guards.moduleloads import ModuleFacts
from torchstack.guards.moduletree import ModuleTree, Resolved, TreeError, read_tree

log = logging.getLogger(__name__)

CORE = "Core"  # HierarchicalMNS's top module path (det_init_modulepaths)
MAX_MODULEPATHS = 16  # ways to reach one level: a web of toolchains ends here
_MAX_DEPTH = 32  # nested loads followed for what they add to MODULEPATH

Modulepath = tuple[str, ...]  # levels (folders below modules/all), searched first to last


@dataclass(frozen=True)
class Hierarchy:
    """The levels of one module tree, what each module adds to MODULEPATH, and its loads."""

    whole: ModuleTree  # modules/all: modules by their full names
    levels: Mapping[str, ModuleTree]  # level -> its own tree ("" is `whole`)
    facts: Mapping[str, ModuleFacts]  # full name -> what its module file says
    adds: Mapping[str, tuple[Modulepath, Modulepath]]  # full name -> levels put first, last
    _cache: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    def level_of(self, full: str) -> str:
        """The deepest level that holds module `full`."""
        return max((level for level in self.levels
                    if not level or full.startswith(level + "/")), key=len)

    def short_name(self, full: str) -> str:
        """`full` as Lmod names it under its own level (`PyTorch/2.6.0`)."""
        level = self.level_of(full)
        return full[len(level) + 1:] if level else full

    def modulepaths(self, full: str) -> tuple[Modulepath, ...]:
        """Each MODULEPATH under which module `full` is visible, searched first to last."""
        return self._reaching(self.level_of(full), frozenset())

    def resolve(self, written: str, modulepath: Modulepath) -> Resolved:
        """The module (full name) that Lmod loads for `written` under `modulepath`."""
        tree, origin = self._merged(modulepath)
        found = tree.resolve(written)
        if found.module is None:
            rest = [level or "modules/all" for level in modulepath[1:]]
            return Resolved(None, (found.doubt or repr(written))
                            + (f", nor in {', '.join(rest)} after it" if rest else ""))
        level = origin[found.module]
        return Resolved(f"{level}/{found.module}" if level else found.module)

    def after_load(self, full: str, modulepath: Modulepath,
                   loading: frozenset[str] = frozenset()) -> Modulepath:
        """MODULEPATH once module `full` is loaded under `modulepath`: what its loads add,
        then what it adds itself (prepended in front, appended at the end)."""
        key = ("after", full, modulepath)
        if key in self._cache:
            return self._cache[key]  # type: ignore[return-value]
        facts = self.facts.get(full)
        path = modulepath
        if facts is not None and full not in loading and len(loading) < _MAX_DEPTH:
            for written in facts.loads:
                found = self.resolve(written, path).module
                if found is not None:
                    path = self.after_load(found, path, loading | {full})
        first, last = self.adds.get(full, ((), ()))
        path = (*first, *(level for level in path if level not in first))
        path = (*path, *(level for level in last if level not in path))
        self._cache[key] = path
        return path

    def _reaching(self, level: str, seen: frozenset[str]) -> tuple[Modulepath, ...]:
        """The MODULEPATHs once a module that adds `level` is loaded, itself or through its
        loads (GCC/13.2.0 loads GCCcore/13.2.0, which adds Compiler/GCCcore/13.2.0)."""
        if level in seen or not any(level in (*a, *b) for a, b in self.adds.values()):
            return ((level,),)
        found: list[Modulepath] = []
        for adder in sorted(self.adds):
            if self.level_of(adder) == level:
                continue
            for base in self._reaching(self.level_of(adder), seen | {level}):
                path = self.after_load(adder, base)
                if level in path and level not in base and path not in found:
                    found.append(path)
        if len(found) > MAX_MODULEPATHS:
            log.warning("%s is reached through %d MODULEPATHs: %d checked", level or "modules/all",
                        len(found), MAX_MODULEPATHS)
        return tuple(found[:MAX_MODULEPATHS]) or ((level,),)

    def _merged(self, modulepath: Modulepath) -> tuple[ModuleTree, dict[str, str]]:
        key = ("merged", modulepath)
        if key not in self._cache:
            self._cache[key] = merge([(level, self.levels[level]) for level in modulepath
                                      if level in self.levels])
        return self._cache[key]  # type: ignore[return-value]


def merge(trees: list[tuple[str, ModuleTree]]) -> tuple[ModuleTree, dict[str, str]]:
    """One tree of the module paths `trees` (level, tree) as Lmod merges a MODULEPATH, and
    the level each of its names comes from."""
    if not trees:
        return ModuleTree(Path(os.devnull), {}, {}, {}), {}
    modules: dict[str, Path] = {}
    origin: dict[str, str] = {}
    aliases: dict[str, str] = {}
    undecided: dict[str, str] = {}
    marks: set[str] = set()
    for level, tree in trees:
        marked = tree.marked()
        for name, path in tree.modules.items():
            # Lmod keeps the first, unless a later module path marks it and the first does not
            if name not in modules or (name in marked and name not in marks):
                modules[name], origin[name] = path, level
        marks |= marked
        for mapping, own in ((aliases, tree.aliases), (undecided, tree.undecided)):
            for name, value in own.items():
                mapping.setdefault(name, value)
    merged = ModuleTree(trees[0][1].root, modules, {}, undecided, aliases,
                        marks=frozenset(marks))
    return merged, origin


def read_hierarchy(whole: ModuleTree, facts: Mapping[str, ModuleFacts]) -> Hierarchy:
    """The levels of the tree `whole` (modules/all), each walked as Lmod walks a module path."""
    adds = {name: (_levels(whole.root, found.prepends), _levels(whole.root, found.appends))
            for name, found in facts.items()}
    adds = {name: pair for name, pair in adds.items() if pair != ((), ())}
    wanted = {level for first, last in adds.values() for level in (*first, *last)}
    wanted |= {name.rsplit("/", 2)[0] for name in adds if name.count("/") >= 2}
    if (whole.root / CORE).is_dir():
        wanted.add(CORE)
    levels: dict[str, ModuleTree] = {"": whole}
    for level in sorted(wanted - {""}):
        if not (whole.root / level).is_dir():  # on MODULEPATH all the same, with nothing in it
            log.debug("module path %s is no folder", whole.root / level)
            continue
        try:
            levels[level] = read_tree(whole.root / level)
        except (OSError, TreeError) as exc:
            log.warning("module path %s not read: %s", whole.root / level, exc)
    log.debug("module path levels of %s: %s", whole.root, sorted(levels))
    return Hierarchy(whole, levels, facts, adds)


def _levels(root: Path, paths: tuple[str, ...]) -> Modulepath:
    """The levels (folders below `root`) among module paths; others are not this tree's."""
    found = []
    for path in paths:
        level = _below(root, path)
        if level is None:
            log.debug("module path %s is not in %s: not followed", path, root)
        elif level not in found:
            found.append(level)
    return tuple(found)


def _below(root: Path, path: str) -> str | None:
    for base, where in ((str(root), os.path.normpath(path)),
                        (os.path.realpath(root), os.path.realpath(path))):
        if where == base:
            return ""
        if where.startswith(base + os.sep):
            return where[len(base) + 1:]
    return None
