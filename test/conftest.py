"""Session fixtures shared by the whole suite: the real torch wheels of this machine.

The wheels come through this machine's pip configuration (`pip download --no-deps`), are cached
across sessions under $TORCHSTACK_CACHE (default ~/.cache/torchstack), and are installed once
with `pip install --no-deps --target` for tests that need installed trees.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Serialise builders of one cache entry across concurrent pytest runs."""
    with open(cache_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def download_wheel(requirement: str) -> Path:
    """One wheel from this machine's pip configuration, downloaded once and cached."""
    name, _, version = requirement.partition("==")
    dest = cache_dir() / "wheels"
    pattern = f"{name}-{version}[-+]*.whl"
    with cache_lock("wheels"):
        _download(requirement, dest, pattern)
    found = sorted(dest.glob(pattern))
    assert found, f"pip download {requirement} produced no wheel in {dest}"
    return found[0]


def _download(requirement: str, dest: Path, pattern: str) -> None:
    if not sorted(dest.glob(pattern)):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--disable-pip-version-check", "--dest", str(dest), requirement],
            check=True,
        )


def install_tree(wheel: Path) -> Path:
    """`pip install --no-deps --target` of a wheel, once; returns the site-packages folder."""
    target = cache_dir() / "trees" / wheel.stem / "site-packages"
    done = target.parent / ".complete"
    with cache_lock("trees"):
        if done.exists():
            return target
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


# -- real EasyBuild and Lmod ----------------------------------------------------------------

from ebenv import EasyBuildEnv, make_python_root, sha256, wheel_easyconfig  # noqa: E402


@pytest.fixture(scope="session")
def eb_env(tmp_path_factory: pytest.TempPathFactory) -> EasyBuildEnv:
    """One EasyBuild install path with a Python module, shared by the session."""
    if not Path("/usr/share/lmod/lmod/libexec/lmod").exists():
        pytest.fail("Lmod is not installed: run scripts/setup (apt-get install lmod)")
    root = tmp_path_factory.mktemp("easybuild")
    with cache_lock("pyroot"):
        python_root = make_python_root(cache_dir())
    return EasyBuildEnv(root, python_root).setup()


@pytest.fixture(scope="session")
def pytorch_cpu_module(eb_env: EasyBuildEnv, real_wheel: object) -> str:
    """PyTorch/2.13.0-whl installed by the real eb from the real torch-2.13.0+cpu wheel."""
    wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
    eb_env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(
        eb_env.root / "PyTorch-2.13.0-whl.eb", "PyTorch", "2.13.0",
        [("torch", "2.13.0+cpu", wheel, sha256(wheel))],
    )
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return "PyTorch/2.13.0-whl"
