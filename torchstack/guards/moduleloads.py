"""Module files of an EasyBuild install path: which files are modules, and what each loads.

Only the load statements EasyBuild writes are understood, as pure functions over text:
- Lua: `depends_on("A/1")`, `load("A/1")`, `always_load("A/1")`, with string-literal
  arguments only (`load(atleast("A", "1"))` is not followed);
- Tcl: `module load A/1 ...` (or `module add`) and `depends-on A/1 ...`.
Conditions around them (`isloaded`, `is-loaded`) are not evaluated: a module file that loads
a module under any condition is taken to depend on it. Comments and Lua long strings (help
and whatis texts) are removed first, so a load in a comment or a help text does not count.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

_NOT_MODULES = frozenset({".modulerc", ".modulerc.lua", ".version"})
_TCL_MAGIC = b"#%Module"

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


def parse_lua_dependencies(text: str) -> tuple[str, ...]:
    """The modules a Lua module file loads, in order of appearance, without repeats."""
    code = _LUA_NOISE.sub(lambda m: m.group("string") or " ", text)
    names = []
    for match in _LUA_LOAD.finditer(code):
        names += [literal[1:-1] for literal in re.findall(_LUA_STRING, match.group(1))]
    return _unique(name.strip() for name in names)


def parse_tcl_dependencies(text: str) -> tuple[str, ...]:
    """The modules a Tcl module file loads (`module load`, `depends-on`), without repeats."""
    lines = text.replace("\\\n", " ").splitlines()
    code = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    names = []
    for match in _TCL_LOAD.finditer(code):
        words = (word.strip("\"{}") for word in match.group(1).split())
        names += [word for word in words if word and not word.startswith("-")]
    return _unique(names)


def module_dependencies(path: Path) -> tuple[str, ...]:
    """The modules a module file loads, parsed as Lua (`.lua`) or Tcl (anything else)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    found = parse_lua_dependencies(text) if path.suffix == ".lua" else parse_tcl_dependencies(text)
    log.debug("%s loads %s", path, list(found))
    return found


def module_files(modules_all: Path) -> list[tuple[str, Path]]:
    """(full name, path) of every module file below a modules/all folder, in name order.

    `Name/version.lua` is the Lua module Name/version; a file without `.lua` is a Tcl module
    when it starts with `#%Module`. `.modulerc*`, `.version` and EasyBuild's `.bak_` backups
    are not modules.
    """
    found = []
    for path in modules_all.rglob("*"):
        if path.name in _NOT_MODULES or ".bak_" in path.name or not path.is_file():
            continue
        relative = path.relative_to(modules_all).as_posix()
        if path.suffix == ".lua":
            found.append((relative[: -len(".lua")], path))
        elif _is_tcl_module(path):
            found.append((relative, path))
        else:
            log.debug("%s: neither .lua nor #%%Module, not a module file", path)
    return sorted(found)


def _is_tcl_module(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(len(_TCL_MAGIC)) == _TCL_MAGIC


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for name in names if name))
