"""The easyconfig an installation keeps, and the same easyconfig switched to another PyTorch.

EasyBuild copies the easyconfig it installed from into `<installdir>/easybuild/`. A consumer
is rebuilt on the source PyTorch from that file: EasyBuild's own parser reads it, its
`versionsuffix` and the dependencies on the wheel stack are changed, and EasyBuild's own
writer (`EasyConfig.dump`) writes the result. Easyblock-specific parameters are declared to
the parser as they are found (a site's or torchstack's easyblock need not be importable).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchstack._files import MAX_EASYCONFIG, read_text
from torchstack.errors import TorchstackError
from torchstack.generator import _ebconfig

log = logging.getLogger(__name__)


class RecipeError(TorchstackError):
    """An installation without a readable easyconfig, or one EasyBuild cannot rewrite."""


@dataclass(frozen=True)
class Dependency:
    """What a dependency becomes in a switched easyconfig."""

    version: str
    versionsuffix: str
    toolchain: tuple[str, str] | None = None  # None: as the easyconfig had it


@dataclass(frozen=True)
class Recipe:
    """The facts of an installation's easyconfig that a promotion needs."""

    path: Path
    name: str
    version: str
    versionsuffix: str
    toolchain: tuple[str, str]
    dependencies: tuple[str, ...]  # full module names, build dependencies included
    prebuilt: bool  # it installs wheels: binaries built elsewhere, against another torch

    def as_dependency(self) -> Dependency:
        return Dependency(self.version, self.versionsuffix, self.toolchain)


def installed_recipe(software: Path) -> Recipe:
    """The easyconfig in `<software>/easybuild/` (the one named after the module, if several)."""
    folder = software / "easybuild"
    try:
        found = sorted(p for p in folder.glob("*.eb") if p.is_file())
    except OSError as exc:
        raise RecipeError(f"cannot read {str(folder)!r}: {exc.strerror or exc}") from exc
    named = folder / f"{software.parent.name}-{software.name}.eb"
    if named in found:
        found = [named]
    if len(found) != 1:
        what = "no easyconfig" if not found else f"{len(found)} easyconfigs"
        raise RecipeError(f"{what} in {str(folder)!r}, where EasyBuild keeps the one it "
                          f"installed from")
    with _ebconfig.session():
        return _recipe(found[0], _load(found[0]))


def switched(recipe: Recipe, versionsuffix: str,
             replace: Mapping[str, Dependency]) -> tuple[str, str]:
    """(file name, text) of `recipe` with `versionsuffix` and the dependencies named (by full
    module name) in `replace` changed, written by EasyBuild."""
    from easybuild.tools.module_naming_scheme.utilities import det_full_ec_version

    with _ebconfig.session():
        ec = _load(recipe.path)
        ec["versionsuffix"] = versionsuffix
        for key in ("dependencies", "builddependencies"):
            entries = ec[key]
            for entry in entries:
                _switch(entry, replace)
            ec[key] = entries
        filename = f"{ec['name']}-{det_full_ec_version(ec)}.eb"
        with tempfile.TemporaryDirectory(prefix="torchstack-rollout-") as tmp:
            target = Path(tmp) / filename
            try:
                ec.dump(str(target))
            except _ebconfig.EasyBuildError as exc:
                raise RecipeError(f"EasyBuild cannot write {filename}: {exc.msg}") from exc
            return filename, read_text(target, MAX_EASYCONFIG, RecipeError)


def _switch(entry: Any, replace: Mapping[str, Dependency]) -> None:
    if not isinstance(entry, dict):  # a list of alternatives (iterated build dependencies)
        for item in entry if isinstance(entry, list) else ():
            _switch(item, replace)
        return
    new = replace.get(str(entry.get("full_mod_name")))
    if new is None:
        return
    log.debug("%s -> %s %s", entry["full_mod_name"], new.version, new.versionsuffix)
    entry["version"], entry["versionsuffix"] = new.version, new.versionsuffix
    if new.toolchain is not None:
        entry["toolchain"] = {"name": new.toolchain[0], "version": new.toolchain[1]}
        entry["system"] = new.toolchain[0] == _ebconfig.SYSTEM[0]
        entry["toolchain_inherited"] = False


def _recipe(path: Path, ec: Any) -> Recipe:
    toolchain = ec["toolchain"]
    with ec.disable_templating():
        raw = (ec["sources"], ec["exts_list"])
    deps = [str(d["full_mod_name"]) for d in ec.dependencies() if d.get("full_mod_name")]
    return Recipe(path=path, name=str(ec["name"]), version=str(ec["version"]),
                  versionsuffix=str(ec["versionsuffix"] or ""),
                  toolchain=(str(toolchain["name"]), str(toolchain["version"])),
                  dependencies=tuple(deps),
                  prebuilt=ec["easyblock"] == "PyTorchWheels"
                  or any(name.endswith(".whl") for name in _strings(raw)))


def _strings(value: Any) -> Iterator[str]:
    """Every string inside nested lists, tuples and dict values."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def read_easyconfig(path: Path) -> str:
    """An easyconfig's text, read bounded and only from a regular file (EasyBuild itself
    would wait on a FIFO and read a link to /dev/zero for ever); UTF-8, as EasyBuild wants."""
    try:
        return read_text(path, MAX_EASYCONFIG, RecipeError)
    except OSError as exc:
        raise RecipeError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc


def _load(path: Path) -> Any:
    """EasyBuild's EasyConfig of one file, parsed without its easyblock class. Needs a session."""
    from easybuild.framework.easyconfig.default import CUSTOM, DEFAULT_CONFIG
    from easybuild.framework.easyconfig.easyconfig import EasyConfig
    from easybuild.framework.easyconfig.parser import EasyConfigParser

    where = str(path)
    text = read_easyconfig(path)
    try:
        raw = EasyConfigParser(rawcontent=text).get_config_dict()
        # Declared with no default, so that EasyBuild's writer keeps each of them.
        extra = {key: [None, "", CUSTOM] for key in raw if key not in DEFAULT_CONFIG}
        return EasyConfig(where, extra_options=extra, validate=False, rawtxt=text)
    except _ebconfig.EasyBuildError as exc:
        raise RecipeError(f"EasyBuild cannot read {where!r}: {exc.msg}") from exc
