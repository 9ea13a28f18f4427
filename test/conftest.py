"""Session fixtures shared by the whole suite: the real torch wheels of this machine.

The wheels come through this machine's pip configuration (`pip download --no-deps`), are cached
across sessions under $TORCHSTACK_CACHE (default ~/.cache/torchstack), and are installed once
with `pip install --no-deps --target` for tests that need installed trees.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REAL_WHEELS = {
    "torch-2.13.0": "torch==2.13.0",
    "torch-2.14.1": "torch==2.14.1",
    "torchvision-0.28.0": "torchvision==0.28.0",
    "torchvision-0.29.1": "torchvision==0.29.1",
}


def cache_dir() -> Path:
    root = os.environ.get("TORCHSTACK_CACHE") or os.path.expanduser("~/.cache/torchstack")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def download_wheel(requirement: str) -> Path:
    """One wheel from this machine's pip configuration, downloaded once and cached."""
    name, _, version = requirement.partition("==")
    dest = cache_dir() / "wheels"
    pattern = f"{name}-{version}[-+]*.whl"
    found = sorted(dest.glob(pattern))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--disable-pip-version-check", "--dest", str(dest), requirement],
            check=True,
        )
        found = sorted(dest.glob(pattern))
    assert found, f"pip download {requirement} produced no wheel in {dest}"
    return found[0]


def install_tree(wheel: Path) -> Path:
    """`pip install --no-deps --target` of a wheel, once; returns the site-packages folder."""
    target = cache_dir() / "trees" / wheel.stem / "site-packages"
    done = target.parent / ".complete"
    if not done.exists():
        shutil.rmtree(target.parent, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
             "--disable-pip-version-check", "--target", str(target), str(wheel)],
            check=True,
        )
        done.touch()
    return target


@pytest.fixture(scope="session")
def real_wheel() -> object:
    """Factory: real_wheel("torch-2.13.0") -> Path of the cached real wheel."""
    return lambda key: download_wheel(REAL_WHEELS[key])


@pytest.fixture(scope="session")
def real_tree(real_wheel: object) -> object:
    """Factory: real_tree("torch-2.13.0") -> site-packages with that wheel installed."""
    return lambda key: install_tree(real_wheel(key))  # type: ignore[operator]
