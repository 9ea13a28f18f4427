"""The Python interpreter whose environment doctor inspects: its sys.path, prefixes and tags.

Either the running interpreter, or another one asked in a subprocess that imports nothing
heavy. `site` runs there as it does for the user, so .pth files, the user site and a venv's
pyvenv.cfg shape sys.path exactly as `import torch` will see it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchstack._files import MAX_CONFIG, FileKindError, read_text
from torchstack.doctor.findings import DoctorError

log = logging.getLogger(__name__)

_TIMEOUT = 120
# Printed by the inspected interpreter; only modules that `site` has already imported.
_PROBE = """\
import importlib.machinery, json, os, site, sys
print(json.dumps({
    "executable": sys.executable, "version": list(sys.version_info[:2]),
    "prefix": sys.prefix, "base_prefix": sys.base_prefix, "path": sys.path[1:],
    "user_site": site.USER_SITE if site.ENABLE_USER_SITE else None,
    "ext_suffixes": importlib.machinery.EXTENSION_SUFFIXES,
}))
"""


@dataclass(frozen=True)
class Interpreter:
    """What decides where `import torch` looks: sys.path in order, and whose Python it is."""

    executable: str
    version: tuple[int, int]
    prefix: str
    base_prefix: str
    path: tuple[str, ...]
    user_site: str | None
    ext_suffixes: tuple[str, ...]

    @property
    def in_venv(self) -> bool:
        return os.path.realpath(self.prefix) != os.path.realpath(self.base_prefix)

    @property
    def system_site_packages(self) -> bool | None:
        """A venv's include-system-site-packages; None outside a venv."""
        if not self.in_venv:
            return None
        return venv_config(Path(self.prefix)).get("include-system-site-packages") == "true"

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def describe(self) -> str:
        """E.g. '/v/bin/python (Python 3.11, venv without system site-packages)'."""
        if not self.in_venv:
            kind = "no venv"
        elif self.system_site_packages:
            kind = "venv with system site-packages"
        else:
            kind = "venv without system site-packages"
        return f"{self.executable} (Python {self.version_text}, {kind})"

    def to_json(self) -> dict[str, Any]:
        return {"executable": self.executable, "version": self.version_text,
                "prefix": self.prefix, "base_prefix": self.base_prefix,
                "venv": self.in_venv, "system_site_packages": self.system_site_packages,
                "path": list(self.path), "user_site": self.user_site}


def venv_config(prefix: Path) -> dict[str, str]:
    """The key = value lines of a venv's pyvenv.cfg, keys lower-cased; {} without one."""
    try:
        text = read_text(prefix / "pyvenv.cfg", MAX_CONFIG, replace=True)
    except (OSError, FileKindError) as exc:  # informational: taken as no pyvenv.cfg
        log.debug("%s/pyvenv.cfg: %s", prefix, exc)
        return {}
    pairs = (line.partition("=") for line in text.splitlines())
    return {k.strip().lower(): v.strip().lower() for k, sep, v in pairs if sep}


def current() -> Interpreter:
    """The running interpreter; its script folder (sys.path[0]) left out as for `-c`."""
    import importlib.machinery
    import site

    return Interpreter(
        executable=sys.executable,
        version=(sys.version_info[0], sys.version_info[1]),
        prefix=sys.prefix,
        base_prefix=sys.base_prefix,
        path=tuple(sys.path[1:]),
        user_site=site.USER_SITE if site.ENABLE_USER_SITE else None,
        ext_suffixes=tuple(importlib.machinery.EXTENSION_SUFFIXES),
    )


def query(python: str, environ: Mapping[str, str]) -> Interpreter:
    """Ask the interpreter `python` (a path, or a name looked up on PATH) for its sys.path."""
    executable = _locate(python, environ)
    try:
        result = subprocess.run([executable, "-c", _PROBE], env=dict(environ), text=True,
                                capture_output=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DoctorError(f"cannot run {python!r}: {exc}") from exc
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise DoctorError(f"{python!r} is not a working Python interpreter: {last}")
    try:
        return _from_probe(json.loads(result.stdout))
    except (ValueError, KeyError, TypeError) as exc:
        raise DoctorError(f"{python!r} did not answer as a Python 3 interpreter: {exc}") from exc


def _locate(python: str, environ: Mapping[str, str]) -> str:
    if os.sep not in python:
        found = shutil.which(python, path=environ.get("PATH", os.defpath))
        if found is None:
            raise DoctorError(f"{python!r} is not on PATH")
        return found
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise DoctorError(f"{python!r} is not an executable file")
    return python


def _from_probe(data: dict[str, Any]) -> Interpreter:
    major, minor = data["version"]
    log.debug("interpreter %s: sys.path %s", data["executable"], data["path"])
    return Interpreter(
        executable=str(data["executable"]),
        version=(int(major), int(minor)),
        prefix=str(data["prefix"]),
        base_prefix=str(data["base_prefix"]),
        path=tuple(str(p) for p in data["path"]),
        user_site=data["user_site"],
        ext_suffixes=tuple(str(s) for s in data["ext_suffixes"]),
    )
