"""Where the files that EasyBuild reads live: easyblocks, the hooks file, templates, the
shipped easyconfigs.

They are package data of torchstack, so they are found the same way after an editable and a
non-editable install.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from torchstack.errors import TorchstackError


class PathsError(TorchstackError):
    """An installation of torchstack that lacks one of its data folders."""


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise PathsError(f"torchstack is installed without its {package!r} data")
    return Path(locations[0])


def easyblocks_path() -> Path:
    """The folder of torchstack's easyblocks, for `eb --include-easyblocks=PATH/*.py`."""
    return _package_dir("torchstack.easyblocks")


def templates_path() -> Path:
    """The folder of torchstack's Jinja2 easyconfig templates."""
    return _package_dir("torchstack.templates")


def easyconfigs_path() -> Path:
    """The easyconfigs tree shipped with torchstack, for `eb --robot=PATH`."""
    return _package_dir("torchstack.easyconfigs")


def hooks_path() -> Path:
    """The EasyBuild hooks file, for `eb --hooks=PATH`; found without importing it."""
    spec = importlib.util.find_spec("torchstack.install.hooks")
    if spec is None or spec.origin is None:
        raise PathsError("torchstack is installed without its EasyBuild hooks file")
    return Path(spec.origin)
