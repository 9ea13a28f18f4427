"""The module files of an install path as Lmod sees them, and the module that a load names
(docs/design.rst, "How Lmod resolves a load").

Which files are modules follows Lmod's DirTree (8.6): every file ending in `.lua`, and every
other file that starts with `#%Module`, in `modules/all` and its subfolders; symlinks are
followed, to folders and to files (a site may link `modules/all/PyTorch` to a shared
folder). Lmod skips the names its `l_keepFile` rejects (`*~`, `#*`, `*#`, `.#*`, `__*`,
`.*.swp`, `.git`, `.svn`, ...) and so does this walk. A name starting with `.` is a hidden
module to Lmod (loaded by its full name only, never a default): it stays a module here, but
for two kinds of leftovers that nothing loads: torchstack's own staging files
(`.<name>.tmp-<8 hex>`, left by a write that was killed) and EasyBuild's hidden module
backups (`.<version>.bak_<time>`). A folder reached again below itself (a symlink loop) is
not entered again: Lmod follows a loop until the kernel stops it, listing every name on the
way, and a load of such a name is unresolved here, never taken for another module.

A load names a module by its full name, an alias (`module_alias`, `module-alias`), a
symbolic version (`module_version`, `module-version`), a folder (its default) or the start
of a version (Lmod's extended default: `PyTorch/2.9` is the best `PyTorch/2.9.*`). The
default of a folder is the one marked by the first of `default` (a symlink), `.modulerc.lua`,
`.modulerc` and `.version` that is present (Lmod reads only that one), else the highest
visible version in Lmod's version order (`lmodversion`). What cannot be decided (an rc file
that cannot be read or marks a default in a way not understood here) is `Resolved.doubt`.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from torchstack._files import MAX_CONFIG, FileKindError, open_regular, read_text
from torchstack.errors import TorchstackError
from torchstack.guards.lmodversion import weight
from torchstack.guards.moduleloads import lua_code, tcl_code
from torchstack.output import staged_name

log = logging.getLogger(__name__)

# The files that mark a folder's default (rollout writes its own block into the rc files),
# and Lmod's precedence of them (DirTree's defaultFnT): the first one present decides.
DEFAULT_LINK = "default"
RC_FILES = {"lua": ".modulerc.lua", "tcl": ".modulerc"}  # by module syntax
VERSION_FILE = ".version"
DEFAULT_SOURCES = (DEFAULT_LINK, RC_FILES["lua"], RC_FILES["tcl"], VERSION_FILE)
MAX_ENTRIES = 500_000  # a web of folder symlinks must end in an error, not a day's walk
_IGNORED = frozenset({".git", ".gitignore", ".svn", ".lua", ".DS_Store"})
_BACKUP = re.compile(r"^\..+\.bak_\d+")  # EasyBuild's hidden backups of Tcl module files
_TCL_MAGIC = b"#%Module"
_MAX_HOPS = 16
_STRING = r"""(?:"([^"\n]*)"|'([^'\n]*)')"""
_LUA_CALL = re.compile(rf"(?<![\w.:])(module_version|module_alias)\s*\(((?:\s*{_STRING}\s*,?)+)\)")
_TCL_CALL = re.compile(r"^[ \t]*(module-version|module-alias)[ \t]+([^\n;]+)", re.M)
_TCL_VERSION = re.compile(r"""^[ \t]*set[ \t]+ModulesVersion[ \t]+["{]?([^"}\s]+)""", re.M)
_MARKS_DEFAULT = re.compile(r"\bdefault\b|ModulesVersion")


class TreeError(TorchstackError):
    """A module tree that cannot be walked to its end."""


def lmod_ignores(name: str) -> bool:
    """True for the names Lmod's DirTree skips (`l_keepFile`): never a module, never a folder."""
    return (name in _IGNORED or name.endswith(("~", "#")) or name.startswith(("#", ".#", "__"))
            or (name.startswith(".") and name.endswith(".swp")))


def is_leftover(name: str) -> bool:
    """A hidden staging file of an interrupted write, or EasyBuild's hidden module backup."""
    return staged_name(name) is not None or bool(_BACKUP.match(name))


@dataclass(frozen=True)
class Resolved:
    """The module a load names; `doubt` says why none could be named, when that is so."""

    module: str | None
    doubt: str | None = None


@dataclass(frozen=True)
class ModuleTree:
    """Module full name -> file; folder marks and rc definitions; what could not be read."""

    root: Path
    modules: Mapping[str, Path]
    defaults: Mapping[str, str]  # folder name -> the default its first rc file marks
    undecided: Mapping[str, str]  # folder name -> why its default cannot be known
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias -> what it names
    problems: tuple[tuple[str, str], ...] = ()  # (folder, why) of those that cannot be listed
    marks: frozenset[str] = frozenset()  # marked defaults besides `defaults` (merged trees)

    def marked(self) -> frozenset[str]:
        """The full names of the modules marked as their folder's default."""
        named = (value if value.startswith(f"{folder}/") else f"{folder}/{value}"
                 for folder, value in self.defaults.items())
        return self.marks | frozenset(name for name in named if name in self.modules)

    def resolve(self, written: str) -> Resolved:
        """The module Lmod loads for `written` (`load("...")`), or why it cannot be told."""
        name = written.strip("/")
        for _ in range(_MAX_HOPS):
            if name not in self.aliases:
                break
            name = self.aliases[name]
        else:
            return Resolved(None, f"{written!r}, an alias that leads back to itself")
        if name in self.modules:
            return Resolved(name)
        return self._search(name, written)

    def _search(self, name: str, written: str) -> Resolved:
        sn, version = self._short_name(name)
        nothing = Resolved(None, f"{written!r}, which names no module in {str(self.root)!r}")
        if sn is None:
            return nothing
        if sn in self.undecided:
            return Resolved(None, f"{written!r}, whose default cannot be told: "
                                  f"{self.undecided[sn]}")
        found = self._candidates(sn, version)
        if not found:
            return nothing
        return Resolved(max(found, key=lambda full: self._weight(sn, full)))

    def _short_name(self, name: str) -> tuple[str | None, str | None]:
        """Lmod's `l_find_vA`: the longest leading part of `name` that is a module folder."""
        sn: str = name
        while sn:
            if any(full.startswith(sn + "/") for full in self.modules):
                return sn, (name[len(sn) + 1:] or None)
            sn = sn.rpartition("/")[0]
        return None, None

    def _candidates(self, sn: str, version: str | None) -> list[str]:
        """The visible modules a load of `sn[/version]` chooses among (Lmod's collectFileA)."""
        below = [full for full in self.modules if full.startswith(sn + "/")]
        if version is not None:
            boundary = "" if re.search(r"[-+_.=a-zA-Z]$", version) else "[-+_.=]"
            pattern = re.compile(re.escape(f"{sn}/{version}") + boundary)
            matched = [full for full in below if pattern.match(full)]
            if matched or version != "default":
                below = matched
        return [full for full in below if not self._hidden(sn, full) or self._marked(sn, full)]

    def _weight(self, sn: str, full: str) -> str:
        return weight(full[len(sn) + 1:], marked=self._marked(sn, full))

    def _marked(self, sn: str, full: str) -> bool:
        value = self.defaults.get(full.rpartition("/")[0])
        return full in self.marks or (value is not None
                                      and value in (full, full.rpartition("/")[2]))

    @staticmethod
    def _hidden(sn: str, full: str) -> bool:
        return any(part.startswith(".") for part in full[len(sn) + 1:].split("/"))


def read_tree(modules_all: Path) -> ModuleTree:
    """Walk `modules_all` as Lmod does; `TreeError` past `MAX_ENTRIES` entries."""
    walk = _Walk(modules_all)
    walk.folder(modules_all, "", ())
    return ModuleTree(modules_all, dict(sorted(walk.modules.items())), walk.defaults,
                      walk.undecided, walk.aliases, tuple(walk.problems))


class _Walk:
    """The state of one walk: what was found so far, and how many entries were seen."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Path] = {}
        self.defaults: dict[str, str] = {}
        self.undecided: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []
        self.seen = 0

    def folder(self, path: Path, name: str, ancestors: tuple[tuple[int, int], ...]) -> None:
        info = os.stat(path)
        here = (info.st_dev, info.st_ino)
        if here in ancestors:  # a symlink back to a folder above: its files are read already
            log.warning("%s is a symlink loop (a folder inside itself): walked once", path)
            return
        rcs: dict[str, Path] = {}
        for entry, kind in self._entries(path):
            child = f"{name}/{entry.name}" if name else entry.name
            if entry.name in DEFAULT_SOURCES:
                rcs[entry.name] = Path(entry.path)
                if entry.name != DEFAULT_LINK or kind != "file":
                    continue
            if kind == "folder":
                self.folder(Path(entry.path), child, (*ancestors, here))
            elif kind == "file":
                self._module_file(Path(entry.path), child)
        if name:
            self._read_rcs(name, rcs)

    def _entries(self, path: Path) -> Iterator[tuple[os.DirEntry[str], str]]:
        """The entries Lmod keeps, with "folder", "file" or "other" (followed symlinks)."""
        try:
            with os.scandir(path) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            self.problems.append((str(path), f"cannot be listed: {exc.strerror or exc}"))
            return
        for entry in entries:
            self.seen += 1
            if self.seen > MAX_ENTRIES:
                raise TreeError(f"{str(self.root)!r} holds more than {MAX_ENTRIES} entries "
                                "(counted through its symlinks): not read to its end")
            if lmod_ignores(entry.name) or is_leftover(entry.name):
                log.debug("%s: skipped, as Lmod skips it or a leftover", entry.path)
                continue
            yield entry, _kind(entry)

    def _module_file(self, path: Path, name: str) -> None:
        if path.name.endswith(".lua"):
            self.modules[name[: -len(".lua")]] = path  # Lua wins over a Tcl file of one name
        elif name not in self.modules and _starts_tcl(path):
            self.modules[name] = path
        else:
            log.debug("%s: neither .lua nor #%%Module, not a module file", path)

    def _read_rcs(self, folder: str, rcs: dict[str, Path]) -> None:
        for index, source in enumerate(s for s in DEFAULT_SOURCES if s in rcs):
            try:
                marked = _rc_default(rcs[source], folder, self.aliases)
            except (OSError, TorchstackError) as exc:
                if index == 0:
                    self.undecided[folder] = str(exc)
                continue
            if index == 0 and marked is not None:
                self.defaults[folder] = marked


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.name == DEFAULT_LINK and entry.is_symlink():
        return "link"
    try:
        mode = os.stat(entry.path).st_mode
    except OSError as exc:  # dangling symlink, symlink loop: Lmod skips it too
        log.debug("%s: %s, skipped", entry.path, os.strerror(exc.errno or errno.EIO))
        return "other"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def _starts_tcl(path: Path) -> bool:
    try:
        with open_regular(path) as handle:
            return handle.read(len(_TCL_MAGIC)) == _TCL_MAGIC
    except (OSError, FileKindError):
        return False


def _rc_default(path: Path, folder: str, aliases: dict[str, str]) -> str | None:
    """The default an rc file marks (None: none); its aliases and symbolic versions added
    to `aliases`; `TreeError` when it marks one in a way not understood here."""
    if path.name == DEFAULT_LINK:
        target = os.readlink(path) if path.is_symlink() else path.name
        return os.path.basename(target).removesuffix(".lua")
    text = read_text(path, MAX_CONFIG, TreeError, replace=True)  # an rc file: a few lines
    pairs = _lua_pairs(text, folder) if path.name.endswith(".lua") else _tcl_pairs(text, folder)
    marked = None
    for name, target in pairs:
        if name == f"{folder}/default":
            marked = target
        else:
            aliases[name] = target
    code = lua_code(text) if path.name.endswith(".lua") else tcl_code(text)
    if marked is None and _MARKS_DEFAULT.search(code):
        raise TreeError(f"{str(path)!r} marks a default in a way not understood here")
    return marked


def _lua_pairs(text: str, folder: str) -> list[tuple[str, str]]:
    """(name, module) of each `module_version(full, sym...)` and `module_alias(name, full)`."""
    pairs = []
    for match in _LUA_CALL.finditer(lua_code(text)):
        args = [a or b for a, b in re.findall(_STRING, match.group(2))]
        if match.group(1) == "module_alias" and len(args) == 2:
            pairs.append((args[0], args[1]))
        elif match.group(1) == "module_version" and "/" in args[0]:
            sn = args[0].rpartition("/")[0]
            pairs += [(f"{sn}/{sym}", args[0]) for sym in args[1:]]
    return pairs


def _tcl_pairs(text: str, folder: str) -> list[tuple[str, str]]:
    """The same for Tcl: `module-version full|/version sym...`, `module-alias`, and
    `set ModulesVersion` (the folder's default)."""
    code = tcl_code(text)
    pairs = [(f"{folder}/default", f"{folder}/{v}") for v in _TCL_VERSION.findall(code)]
    for command, rest in _TCL_CALL.findall(code):
        words = [w.strip("\"{}") for w in rest.split()]
        if command == "module-alias" and len(words) == 2:
            pairs.append((words[0], words[1]))
        elif command == "module-version" and len(words) >= 2 and "/" in words[0]:
            full = f"{folder}{words[0]}" if words[0].startswith("/") else words[0]
            sn = full.rpartition("/")[0]
            pairs += [(f"{sn}/{sym}", full) for sym in words[1:]]
    return pairs
