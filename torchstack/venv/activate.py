"""Lines appended to a venv's activation scripts: warn when its modules are not loaded.

Each shell checks $LOADEDMODULES (Lmod's and Environment Modules' list of loaded modules)
for every module the venv was made on and, when one is missing (another PyTorch loaded, or
none), prints one warning naming the `module load` command. Activation goes on: the warning
is advice, the constraints keep pip from replacing torch either way.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from torchstack._files import read_text

SCRIPTS = {"activate": "sh", "activate.csh": "csh", "activate.fish": "fish"}
_SLOT = "\x00"  # where the shell puts its list of missing modules
# Python's own activate scripts are 1-9 kB: anything much larger was put there by someone else
MAX_SCRIPT = 1 << 20
_MARK = "# torchstack: warn when the modules this venv was made on are not loaded"


def warning_text(venv: Path, missing: str) -> str:
    """The warning, with `missing` standing for the shell's list of missing modules."""
    return (f"torchstack: warning: the venv {venv} was made on modules that are not loaded:"
            f"{missing}; run: module load{missing}")


def snippet(shell: str, venv: Path, modules: list[str]) -> str:
    """The lines for one shell ("sh", "csh" or "fish")."""
    return {"sh": _sh, "csh": _csh, "fish": _fish}[shell](venv, modules)


def _sh(venv: Path, modules: list[str]) -> str:
    words = " ".join(shlex.quote(m) for m in modules)
    message = shlex.quote(warning_text(venv, _SLOT)).replace(_SLOT, "'\"$_ts_missing\"'")
    return f"""
{_MARK}
_ts_missing=""
for _ts_module in {words}; do
    case ":${{LOADEDMODULES:-}}:" in
        *":$_ts_module:"*) ;;
        *) _ts_missing="$_ts_missing $_ts_module" ;;
    esac
done
if [ -n "$_ts_missing" ]; then
    echo {message} >&2
fi
unset _ts_missing _ts_module
"""


def _csh(venv: Path, modules: list[str]) -> str:
    words = " ".join(_csh_quote(m) for m in modules)
    message = _csh_quote(warning_text(venv, _SLOT)).replace(_SLOT, "'\"$_ts_missing\"'")
    return f"""
{_MARK}
set _ts_loaded = ""
if ($?LOADEDMODULES) then
    set _ts_loaded = "$LOADEDMODULES"
endif
set _ts_missing = ""
foreach _ts_module ({words})
    if (":${{_ts_loaded}}:" !~ *":${{_ts_module}}:"*) set _ts_missing = "$_ts_missing $_ts_module"
end
if ("$_ts_missing" != "") echo {message} >> /dev/stderr
unset _ts_loaded _ts_missing _ts_module
"""


def _fish(venv: Path, modules: list[str]) -> str:
    words = " ".join(_fish_quote(m) for m in modules)
    message = _fish_quote(warning_text(venv, _SLOT)).replace(_SLOT, "'\"$_ts_missing\"'")
    return f"""
{_MARK}
set -l _ts_missing ""
for _ts_module in {words}
    if not contains -- $_ts_module (string split -- : "$LOADEDMODULES")
        set _ts_missing "$_ts_missing $_ts_module"
    end
end
if test -n "$_ts_missing"
    echo {message} >&2
end
"""


def _csh_quote(word: str) -> str:
    """Single quotes; csh has no escape inside them, so a quote ends and restarts them."""
    return "'" + word.replace("'", "'\\''").replace("!", "\\!") + "'"


def _fish_quote(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "\\'") + "'"


def install(bin_dir: Path, venv: Path, modules: list[str]) -> dict[Path, str]:
    """New text of each activation script present in `bin_dir`, the snippet appended."""
    texts = {}
    for name, shell in SCRIPTS.items():
        path = bin_dir / name
        if path.is_file():
            old = read_text(path, MAX_SCRIPT)
            texts[path] = old if _MARK in old else old + snippet(shell, venv, modules)
    return texts
