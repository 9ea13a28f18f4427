"""The real wheels of the suite, downloaded once through this machine's pip configuration.

They are cached across sessions under $TORCHSTACK_CACHE (default ~/.cache/torchstack), and
installed once with `pip install --no-deps --target` for tests that need installed trees.
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

REAL_WHEELS = {
    "torch-2.13.0": "torch==2.13.0",
    "torch-2.14.1": "torch==2.14.1",
    "torchvision-0.28.0": "torchvision==0.28.0",
    "torchvision-0.29.1": "torchvision==0.29.1",
    # consumers beyond the companions, from PyPI: stable C shims (all four on x86_64)
    "torchaudio-2.11.1": "torchaudio==2.11.1",
    "torchcodec-0.17.0": "torchcodec==0.17.0",
    "xformers-0.0.35": "xformers==0.0.35",
    "torchao-0.18.0": "torchao==0.18.0",
    # C++ API of libtorch, no torch in its Requires-Dist; runs on 2.14.1, not on 2.13.0
    "fbgemm_gpu_cpu-1.9.0": "fbgemm_gpu_cpu==1.9.0",
}


def cache_dir() -> Path:
    root = os.environ.get("TORCHSTACK_CACHE") or os.path.expanduser("~/.cache/torchstack")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def uv_cache() -> Path:
    """uv's cache of unpacked wheels, kept across sessions: the doctor's venvs and the session's
    eb installs (TORCHSTACK_UV_CACHE) hard-link their files from it, so the CUDA 13 stack is
    unpacked once on this machine, not once per install."""
    return cache_dir() / "uv"


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
