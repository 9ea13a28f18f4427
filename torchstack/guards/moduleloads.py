"""What a module file loads (which files are modules, and which module a load names, is
`moduletree`'s part).

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
    text = read_text(path, MAX_MODULE_FILE, replace=True)
    found = parse_lua_dependencies(text) if path.suffix == ".lua" else parse_tcl_dependencies(text)
    log.debug("%s loads %s", path, list(found))
    return found


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for name in names if name))
