"""Which folders can hold a venv, and how the venv's own files name paths inside it.

A venv's path is written into files that other programs parse: Python's `venv` puts it
between double quotes in the activate scripts (`VIRTUAL_ENV="DIR"`, unescaped up to Python
3.11 at least), and `PATH="$VIRTUAL_ENV/bin:$PATH"` splits it at a colon; pip splits the
values of list options in pip.conf (`constraint`) at whitespace; the kernel ends a `#!`
interpreter at the first space. `check` refuses the characters that no written form
survives, before anything is written; `shebang` (and `doctor.venvrecord.pip_conf_value`)
write the rest in forms their readers take back as the one path.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from torchstack.venv import VenvError

# Expanded or ended inside the double quotes of the activate scripts (sh, csh, fish), or a
# separator of $PATH: no quoting of torchstack's can repair the scripts `venv` writes.
_REFUSED = {"$": "a dollar sign", "`": "a backquote", '"': "a double quote",
            "\\": "a backslash", "!": "an exclamation mark", ":": "a colon"}
# The longest `#!` line that every Linux kernel reads whole, as pip (distlib) counts it.
_SHEBANG_MAX = 127


def check(target: Path) -> None:
    """Refuse a venv path that an activate script, $PATH or a `#!` line would mangle."""
    text = str(target.absolute())
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise VenvError(f"{text!r} cannot hold a venv: it is not valid UTF-8, which the "
                        "venv's scripts and pip.conf are written in") from exc
    bad = sorted({_describe(c) for c in text if c in _REFUSED or _is_control(c)})
    if bad:
        raise VenvError(f"{text!r} cannot hold a venv: it has {' and '.join(bad)}, which the "
                        "activate scripts of Python's venv or $PATH would mangle; choose "
                        "another folder")


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc"


def _describe(char: str) -> str:
    return _REFUSED.get(char) or f"a control character ({char!r})"


def shebang(python: Path) -> str:
    """The first lines of a script run by `python`, as pip writes them (distlib's
    ScriptMaker): `#!python` where the kernel reads it whole, else `#!/bin/sh` and a line
    that sh runs as `exec "python" "$0" "$@"` and Python reads as a string."""
    text = str(python)
    if " " not in text and "\t" not in text and len(text.encode()) + 3 <= _SHEBANG_MAX:
        return f"#!{text}\n"
    # A run of single quotes would end Python's ''' string: sh drops the "" put after each.
    quoted = '"' + text.replace("'", "'\"\"") + '"'
    return f"#!/bin/sh\n'''exec' {quoted} \"$0\" \"$@\"\n' '''\n"
