"""The files that mark a module's default in one module folder, as Lmod ranks them
(docs/design.rst, "How Lmod resolves a load").

Lmod looks in a module folder for `default` (a symlink to a version, or a module file of that
name), `.modulerc.lua`, `.modulerc` and `.version`, in that order, and takes the default from
the first one present (`DirTree.lua`, `defaultFnT`); Environment Modules reads `.modulerc`
and `.version`. Their names have one home, `guards.moduletree`, which reads them for scan.
torchstack owns one marked block in `.modulerc.lua` and `.modulerc`; any other default in
the folder competes with it and is refused by name, never overridden.

Every file is read bounded and only when it is a regular file (or a link to one): a FIFO
would block, a link to /dev/zero never end.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from torchstack._files import MAX_CONFIG, read_text
from torchstack.guards.moduletree import DEFAULT_LINK, RC_FILES, VERSION_FILE
from torchstack.rollout.plan import RolloutError

BEGIN = "torchstack rollout: begin"
BEGIN_LINE = f"{BEGIN} (written by `torchstack rollout`, replaced when run again)"
END = "torchstack rollout: end"
PAIR = "torchstack rollout pair:"
# how a site's line names a default: the "default" argument of Lua's module_version, the
# default word of a Tcl module-version (bare or braced), .version's ModulesVersion; a name
# that merely contains the word (hide_version("PyTorch/2.5-default-build")) is none
_COMPETING = re.compile(r"""(?:["']|\[\[)default(?:["']|\]\])"""
                        r"""|^\s*module-version\b.*(?<![\w/.+-])default(?![\w/.+-])"""
                        r"""|\bModulesVersion\b""")
_COMMENT = re.compile(r"^\s*(--|#)")


class RcFileError(RolloutError):
    """A module folder whose default files torchstack cannot read or must not change."""


@dataclass(frozen=True)
class RcText:
    """One rc file: the site's lines outside torchstack's block, and that block's pair."""

    path: Path
    exists: bool
    kept: tuple[str, ...]
    pairs: tuple[str, ...]  # the pair line of each torchstack block found ("" when none)


def read_rc(path: Path) -> RcText:
    """The rc file at `path` (missing: empty); `RcFileError` when it cannot be read whole."""
    if not os.path.lexists(path):
        return RcText(path, False, (), ())
    try:
        text = read_text(path, MAX_CONFIG, RcFileError)
    except OSError as exc:
        raise RcFileError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    kept, pairs = _split(text)
    return RcText(path, True, tuple(kept), tuple(pairs))


def _split(text: str) -> tuple[list[str], list[str]]:
    kept: list[str] = []
    pairs: list[str] = []
    inside = False
    for line in text.splitlines():
        if BEGIN in line:
            inside = True
            pairs.append("")
        elif inside and END in line:
            inside = False
        elif inside and PAIR in line:
            pairs[-1] = line.split(PAIR, 1)[1].strip()
        elif not inside:
            kept.append(line)
    return kept, pairs


def competing(folder: Path) -> list[str]:
    """Why each default that the site set in `folder` competes with torchstack's."""
    found = []
    link = folder / DEFAULT_LINK
    try:
        info = os.lstat(link)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        found.append(f"cannot read {str(link)!r}: {exc.strerror or exc}")
        info = None
    if info is not None:
        what = (f"a symlink to {os.readlink(link)!r}" if stat.S_ISLNK(info.st_mode)
                else "a file")
        found.append(f"{str(link)!r} is {what}: Lmod takes it as the default before any "
                     f".modulerc; remove it")
    for name in (*RC_FILES.values(), VERSION_FILE):
        path = folder / name
        for line in read_rc(path).kept:
            if _COMPETING.search(line) and not _COMMENT.match(line):
                found.append(f"{str(path)!r} sets a default of its own ({line.strip()!r}); "
                             f"remove it")
                break
    return found
