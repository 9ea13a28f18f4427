"""Module defaults that point `module load NAME` at one stack, in the syntax of the module tree.

A Lua module file gets Lmod's `.modulerc.lua` beside it, a Tcl one `.modulerc` (read by Lmod
and Environment Modules alike). Each module folder of the name is written: `modules/all/NAME`
and the `modules/<class>/NAME` folders EasyBuild links into. A default names the module and,
where no module file has that version, an alias for its release (`PyTorch/2.6.0` for
`PyTorch/2.6.0-foss-2024a`), so that `module load PyTorch/2.6.0` follows the default too.

torchstack owns one marked block of each file and replaces only that; what the site wrote
around it stays. A default that the site set itself in the folder (outside the block, or in
`.version`) would compete with ours: it is refused, naming the file, and nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchstack.output import replace_file
from torchstack.rollout.plan import Plan, RolloutError

BEGIN = "torchstack rollout: begin (written by `torchstack rollout`, replaced when run again)"
END = "torchstack rollout: end"
RC_FILES = {"lua": ".modulerc.lua", "tcl": ".modulerc"}
_OTHER_FILES = (".modulerc.lua", ".modulerc", ".version")
_COMPETING = re.compile(r"\bdefault\b|ModulesVersion")
_COMMENT = re.compile(r"^\s*(--|#)")


@dataclass(frozen=True)
class Default:
    """One module to be its name's default, and the release name that resolves to it."""

    module: str
    release: str | None = None


def promoted(plan: Plan) -> list[Default]:
    """The source stack: TO and each consumer's installation on TO."""
    found = [Default(plan.target.name, plan.target_recipe.version)]
    found += [Default(s.target, s.on_target.version if s.on_target else None)
              for s in plan.steps if s.target is not None]
    return _one_per_name(found)


def rolled_back(plan: Plan) -> list[Default]:
    """The wheel stack: FROM and each of its consumers."""
    found = [Default(plan.source.name, plan.source_recipe.version)]
    found += [Default(s.module, s.recipe.version if s.recipe else None) for s in plan.steps]
    return _one_per_name(found)


def write_defaults(installpath: Path, defaults: Sequence[Default]) -> list[Path]:
    """Write the defaults into every module folder of each name; checked all first."""
    texts: dict[Path, str] = {}
    problems: list[str] = []
    for default in defaults:
        for folder, syntax in module_folders(installpath, default.module):
            path = folder / RC_FILES[syntax]
            try:
                texts[path] = merged(path, block(syntax, default, folder))
                _no_competing(folder, path)
            except RolloutError as exc:
                problems.append(str(exc))
    if problems:
        raise RolloutError("; ".join(problems))
    for path, text in texts.items():
        replace_file(path, text)
    return list(texts)


def module_folders(installpath: Path, module: str) -> list[tuple[Path, str]]:
    """(folder, "lua" or "tcl") of each module folder that holds `module`'s file."""
    name, _, version = module.partition("/")
    found = []
    for folder in sorted((installpath / "modules").glob(f"*/{name}")):
        if (folder / f"{version}.lua").is_file():
            found.append((folder, "lua"))
        elif (folder / version).is_file():
            found.append((folder, "tcl"))
    if not found:
        raise RolloutError(f"no module file of {module!r} in {str(installpath / 'modules')!r}")
    return found


def block(syntax: str, default: Default, folder: Path) -> list[str]:
    """The lines of torchstack's block for one module folder."""
    versions = ["default"]
    release = default.release
    if release and release != default.module.partition("/")[2] and not _has_version(folder,
                                                                                   release):
        versions.append(release)
    if syntax == "lua":
        body = [f'module_version("{default.module}", "{v}")' for v in versions]
        return [f"-- {BEGIN}", *body, f"-- {END}"]
    body = [f"module-version {default.module} {v}" for v in versions]
    return [f"# {BEGIN}", *body, f"# {END}"]


def merged(path: Path, lines: list[str]) -> str:
    """The file's text with torchstack's block replaced by `lines` (added if none)."""
    kept = _outside_block(_read(path))
    if path.name == RC_FILES["tcl"] and not (kept and kept[0].startswith("#%Module")):
        kept.insert(0, "#%Module")
    return "\n".join([*kept, *lines]) + "\n"


def _no_competing(folder: Path, written: Path) -> None:
    for name in _OTHER_FILES:
        path = folder / name
        for line in _outside_block(_read(path)):
            if _COMPETING.search(line) and not _COMMENT.match(line):
                raise RolloutError(f"{str(path)!r} sets a default of its own ({line.strip()!r});"
                                   f" remove it, {str(written)!r} holds torchstack's")


def _outside_block(text: str) -> list[str]:
    kept, inside = [], False
    for line in text.splitlines():
        if BEGIN.split(" (")[0] in line:
            inside = True
        elif END in line and inside:
            inside = False
        elif not inside:
            kept.append(line)
    return kept


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise RolloutError(f"cannot read {str(path)!r}: {exc}") from exc


def _has_version(folder: Path, version: str) -> bool:
    return (folder / f"{version}.lua").exists() or (folder / version).exists()


def _one_per_name(defaults: Iterable[Default]) -> list[Default]:
    """The last default given for each module name (a name has one default)."""
    by_name = {d.module.partition("/")[0]: d for d in defaults}
    return list(by_name.values())
