"""What a module file says about itself: what it loads, where its installation is, and which
module paths it adds (which files are modules, and which module a load names, is
`moduletree`'s part).

Only the load statements EasyBuild writes are understood, as pure functions over text:
- Lua: `depends_on("A/1")`, `load("A/1")`, `always_load("A/1")`, with string-literal
  arguments only (`load(atleast("A", "1"))` is not followed);
- Tcl: `module load A/1 ...` (or `module add`) and `depends-on A/1 ...`.
Conditions around them (`isloaded`, `is-loaded`) are not evaluated: a module file that loads
a module under any condition is taken to depend on it. Comments and Lua long strings (help
and whatis texts) are removed first, so a load in a comment or a help text does not count.

The installation is the `root` EasyBuild writes into every module file it generates (its
ModuleGenerator's INSTALLDIR_REGEX: `local root = "..."` in Lua, `set root ...` in Tcl); a
hierarchical naming scheme puts the module file and the installation in unrelated places
(`modules/all/Core/PyTorch/2.6.0` and `software/PyTorch/2.6.0`), so only the file can tell.
The module paths a file adds are those of `prepend_path("MODULEPATH", "...")` and
`append_path` in Lua, `module use [-a] ...`, `prepend-path MODULEPATH ...` and `append-path` in
Tcl (EasyBuild's `make_module_extend_modpath` writes the first of each), with literal paths.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torchstack._files import MAX_MODULE_FILE, read_text

log = logging.getLogger(__name__)

_LUA_STRING = r"""(?:"[^"\n]*"|'[^'\n]*')"""
# Kept: short strings (a `--` inside one is not a comment). Removed: comments, long strings.
_LUA_NOISE = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')"""
    r"|--\[(?P<c>=*)\[.*?\](?P=c)\]"
    r"|--[^\n]*"
    r"|\[(?P<s>=*)\[.*?\](?P=s)\]",
    re.S,
)
# `unload(`, `try_load(`, `obj:load(` are not loads: no word character, `.` or `:` before.
_LUA_LOAD = re.compile(
    rf"(?<![\w.:])(?:depends_on|always_load|load)\s*\(\s*"
    rf"({_LUA_STRING}(?:\s*,\s*{_LUA_STRING})*)\s*,?\s*\)"
)
_TCL_LOAD = re.compile(r"(?:^|(?<=[\s;{\[]))(?:module\s+(?:load|add)|depends-on)\s+([^;}\]\n]*)")
_LUA_ROOT = re.compile(r'^local root\s+=\s+"(?P<installdir>.*)"', re.M)  # EasyBuild's regexes
_TCL_ROOT = re.compile(r"^set root\s+(?P<installdir>.*)", re.M)
_LUA_USE = re.compile(r"""(?<![\w.:])(prepend|append)_path\s*\(\s*(?:"MODULEPATH"|'MODULEPATH')"""
                      r"""\s*,\s*(?:"([^"\n]*)"|'([^'\n]*)')\s*\)""")
_TCL_USE = re.compile(r"(?:^|(?<=[\s;{\[]))(?:module\s+use|(prepend|append)-path\s+MODULEPATH)"
                      r"\s+([^;}\]\n]*)")


@dataclass(frozen=True)
class ModuleFacts:
    """What one module file says: its loads, its installation, the module paths it adds."""

    loads: tuple[str, ...]
    root: str | None = None  # the installation folder EasyBuild wrote, None when none
    prepends: tuple[str, ...] = ()  # module paths it puts first, first one first
    appends: tuple[str, ...] = ()  # module paths it puts last


def lua_code(text: str) -> str:
    """Lua text without comments and long strings (help and whatis texts)."""
    return _LUA_NOISE.sub(lambda m: m.group("string") or " ", text)


def tcl_code(text: str) -> str:
    """Tcl text with continued lines joined and comment lines removed."""
    lines = text.replace("\\\n", " ").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def parse_lua_dependencies(text: str) -> tuple[str, ...]:
    """The modules a Lua module file loads, in order of appearance, without repeats."""
    names = []
    for match in _LUA_LOAD.finditer(lua_code(text)):
        names += [literal[1:-1] for literal in re.findall(_LUA_STRING, match.group(1))]
    return _unique(name.strip() for name in names)


def parse_tcl_dependencies(text: str) -> tuple[str, ...]:
    """The modules a Tcl module file loads (`module load`, `depends-on`), without repeats."""
    names = []
    for match in _TCL_LOAD.finditer(tcl_code(text)):
        words = (word.strip("\"{}") for word in match.group(1).split())
        names += [word for word in words if word and not word.startswith("-")]
    return _unique(names)


def module_dependencies(path: Path) -> tuple[str, ...]:
    """The modules a module file loads, parsed as Lua (`.lua`) or Tcl (anything else).

    OSError when it cannot be read; FileKindError when it is no regular file or over the bound.
    """
    return module_facts(path).loads


def module_facts(path: Path) -> ModuleFacts:
    """What a module file says, parsed as Lua (`.lua`) or Tcl (anything else); errors as
    `module_dependencies`."""
    text = read_text(path, MAX_MODULE_FILE, replace=True)
    found = parse_lua(text) if path.suffix == ".lua" else parse_tcl(text)
    log.debug("%s loads %s, root %s, adds module paths %s %s", path, list(found.loads),
              found.root, list(found.prepends), list(found.appends))
    return found


def parse_lua(text: str) -> ModuleFacts:
    """The facts of a Lua module file. Lmod runs a file top to bottom and each
    `prepend_path` puts its path in front: the last one written is the first."""
    code = lua_code(text)
    root = _LUA_ROOT.search(code)
    uses: dict[str, list[str]] = {"prepend": [], "append": []}
    for match in _LUA_USE.finditer(code):
        uses[match.group(1)] += _paths(match.group(2) or match.group(3) or "")
    return ModuleFacts(parse_lua_dependencies(text), root.group("installdir") if root else None,
                       tuple(reversed(uses["prepend"])), tuple(uses["append"]))


def parse_tcl(text: str) -> ModuleFacts:
    """The facts of a Tcl module file (`module use` prepends unless `-a`/`--append`)."""
    code = tcl_code(text)
    root = _TCL_ROOT.search(code)
    uses: dict[str, list[str]] = {"prepend": [], "append": []}
    for match in _TCL_USE.finditer(code):
        words = [word.strip("\"{}") for word in match.group(2).split()]
        kind = match.group(1) or ("append" if {"-a", "--append"} & set(words) else "prepend")
        uses[kind] += [p for w in words if not w.startswith("-") for p in _paths(w)]
    installdir = root.group("installdir").strip().strip("\"{}") if root else None
    return ModuleFacts(parse_tcl_dependencies(text), installdir or None,
                       tuple(reversed(uses["prepend"])), tuple(uses["append"]))


def _paths(value: str) -> list[str]:
    """The folders of one MODULEPATH value (Lmod splits it at ':')."""
    return [part for part in value.split(":") if part]


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for name in names if name))
