"""Console scripts of the modules' distributions, run by the venv's Python.

A module's `torchrun` starts the module's Python, which does not see the venv's packages.
The venv gets its own copy of each console script of a pinned distribution, written as pip
writes entry points, with the venv's python on the `#!` line (in pip's `#!/bin/sh` form where
the kernel would not read the path whole): first on PATH once the venv is active, it sees the
venv's packages and the module's alike.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torchstack.distributions import normalize_name
from torchstack.venv.paths import shebang

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_OBJECT = re.compile(r"^(?P<module>[\w.]+)\s*:\s*(?P<attr>[\w.]+)\s*(\[.*\])?$")


@dataclass(frozen=True)
class ConsoleScript:
    """`name = module:attr` of the console_scripts group of a distribution."""

    name: str
    module: str
    attr: str
    distribution: str

    def text(self, python: Path) -> str:
        top, _, _ = self.attr.partition(".")
        return (f"{shebang(python)}"
                f"# {self.name} of {self.distribution}, run by this venv's Python (torchstack)\n"
                "import sys\n"
                f"from {self.module} import {top}\n"
                "if __name__ == '__main__':\n"
                f"    sys.exit({self.attr}())\n")


def console_scripts(places: Iterable[tuple[str, str]]) -> list[ConsoleScript]:
    """The console scripts of each distribution, given as (folder, name): only the copy in
    that folder counts, as only it is imported."""
    wanted: dict[str, set[str]] = {}
    for folder, name in places:
        wanted.setdefault(folder, set()).add(normalize_name(name))
    found: dict[str, ConsoleScript] = {}
    for folder, names in wanted.items():
        for dist in importlib.metadata.distributions(path=[folder]):
            dist_name = dist.metadata["Name"] or ""
            if normalize_name(dist_name) in names:
                for point in dist.entry_points.select(group="console_scripts"):
                    script = _script(point.name, point.value, dist_name)
                    if script is not None:
                        found.setdefault(script.name, script)
    return [found[n] for n in sorted(found)]


def _script(name: str, value: str, distribution: str) -> ConsoleScript | None:
    match = _OBJECT.match(value.strip())
    if not _NAME.match(name) or match is None:
        log.debug("%s: skipping console script %r = %r", distribution, name, value)
        return None
    return ConsoleScript(name, match["module"], match["attr"], distribution)
