"""The pins of a venv: every distribution the loaded modules provide, at its version.

A pin holds the version in the distribution's metadata, which is what pip compares: torch
2.13.0+cpu keeps its local tag, so `torch==2.13.0+cpu` refuses a 2.13.0+cu130 as well as
any other release. pip, setuptools and wheel stay free: the venv has its own pip, and
isolated builds must be able to take the build tools they ask for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from torchstack.distributions import normalize_name
from torchstack.doctor.placement import Places
from torchstack.doctor.stack import Stack
from torchstack.doctor.venvrecord import pip_conf_value

log = logging.getLogger(__name__)

FREE = frozenset({"pip", "setuptools", "wheel"})


@dataclass(frozen=True)
class Pin:
    """One module-provided distribution: name and version as pip reads them, and whence."""

    name: str
    version: str
    module: str | None
    folder: str

    @property
    def line(self) -> str:
        """`name==version`, or `name===version` for a version PEP 440 cannot parse."""
        try:
            Version(self.version)
        except InvalidVersion:
            return f"{self.name}==={self.version}"
        return f"{self.name}=={self.version}"


def module_distributions(stack: Stack, places: Places) -> list[Pin]:
    """Each visible distribution whose folder a loaded module provides, at its version."""
    found = []
    for _, placed in sorted(stack.visible.items()):
        origin = places.origin(placed.folder)
        if origin.kind == "module":
            log.debug("%s from %s", placed.label, origin.label)
            found.append(Pin(placed.dist.name, placed.dist.version, origin.module,
                             placed.folder))
    return found


def module_pins(provided: list[Pin]) -> list[Pin]:
    """The pins among the module-provided distributions: all but the build tools."""
    return [p for p in provided if normalize_name(p.name) not in FREE]


def modules_of(pins: list[Pin], loaded: list[str]) -> list[str]:
    """The named modules that provide pins, in the order they were loaded."""
    named = {p.module for p in pins if p.module and not p.module.startswith("$")}
    return [m for m in loaded if m in named] + sorted(named - set(loaded))


def constraints_text(pins: list[Pin], venv: Path, modules: list[str]) -> str:
    lines = [f"# pip constraints of the venv {venv}, made by torchstack on the modules",
             f"# {' '.join(modules) or '(none named)'}: every distribution they provide.",
             f"# pip reads this file through {venv / 'pip.conf'}; uv takes it as",
             "# uv pip install --constraints FILE (or $UV_CONSTRAINT=FILE).", ""]
    width = max((len(p.line) for p in pins), default=0)
    for pin in pins:
        lines.append(f"{pin.line:<{width}}  # {_whence(pin)}")
    return "\n".join(lines) + "\n"


def _whence(pin: Pin) -> str:
    return f"module {pin.module}" if pin.module else pin.folder


def pip_conf_text(constraints: Path) -> str:
    return ("# torchstack: `pip install` in this venv resolves against the loaded modules' pins\n"
            "[install]\n"
            f"constraint = {pip_conf_value(constraints)}\n")


def uv_toml_text(pins: list[Pin]) -> str:
    """The pins as uv configuration: `uv pip install --config-file $VIRTUAL_ENV/uv.toml`."""
    quoted = ",\n".join(f'    "{p.line}"' for p in pins)
    return ("# torchstack: the pins of torchstack-constraints.txt for uv, which reads no\n"
            "# configuration from a venv: pass this file with --config-file.\n"
            f"constraint-dependencies = [\n{quoted}\n]\n")


def excludes_text(pins: list[Pin]) -> str:
    """The pinned names for `uv pip install --excludes`: uv does not see the modules'
    packages, so it would install a copy of any it needs; excluded, it installs none."""
    return ("# torchstack: what the loaded modules provide; uv pip install --excludes this file\n"
            + "".join(f"{p.name}\n" for p in pins))
