"""Real environments for doctor tests: venvs with real wheels, a stand-in EasyBuild Python;
and running doctor on them, reading its JSON report.

Each venv is made with `python -m venv` and filled by `uv pip install --no-deps --offline`
from the cached wheel files; uv hard-links from its cache, so torch 2.14.1 with its nvidia
wheels (about 5 GB) costs its disk space once. uv byte-compiles what it installs, as pip
does: the tests import torch in these venvs many times with PYTHONDONTWRITEBYTECODE, and
without .pyc files each of those imports compiled torch's modules again. Venvs are cached
across sessions under $TORCHSTACK_CACHE/doctor, each completed one marked by a file, and never
changed by a test.

The stand-in EasyBuild Python is this machine's Python under another prefix (a copy of the
executable, the standard library linked in) whose site-packages holds the sitecustomize.py
that EasyBuild's Python easyblock installs: it reads $EBPYTHONPREFIXES, as on a cluster
where modules are built with --prefer-python-search-path=EBPYTHONPREFIXES.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support.wheelcache import cache_dir, cache_lock, uv_cache

# What torch 2.13 and 2.14 import at run time (their Requires-Dist), and torchvision's.
TORCH_RUNTIME = ("filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", "mpmath",
                 "networkx>=2.5.1", "jinja2", "markupsafe", "fsspec>=0.8.5", "setuptools>=77.0.3")
TORCHVISION_RUNTIME = ("numpy", "pillow")
PYTHON_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
REPO = Path(__file__).resolve().parents[2]


def _key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


def make_venv(name: str, wheels: Sequence[Path], *, python: str = sys.executable,
              system_site_packages: bool = False) -> Path:
    """A venv of `python` holding exactly `wheels` (installed without dependencies)."""
    names = sorted(w.name for w in wheels)
    root = cache_dir() / "doctor" / f"{name}-{_key(python, names, system_site_packages, 'pyc')}"
    with cache_lock(f"doctor-{root.name}"):
        if (root / ".complete").exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        flags = ["--system-site-packages"] if system_site_packages else []
        subprocess.run([python, "-m", "venv", "--without-pip", *flags, str(root)], check=True)
        if wheels:
            subprocess.run(
                [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--offline",
                 "--no-deps", "--link-mode", "hardlink", "--compile-bytecode",
                 "--python", str(root / "bin" / "python"), *map(str, wheels)],
                check=True, env=dict(os.environ, UV_CACHE_DIR=str(uv_cache())),
            )
        (root / ".complete").touch()
    return root


def pip_wheels(requirements: Sequence[str]) -> list[Path]:
    """Wheels from this machine's pip configuration (local disk), downloaded once."""
    dest = cache_dir() / "doctor-wheels"
    with cache_lock("doctor-wheels"):
        done = dest / f".{_key(tuple(requirements))}"
        if not done.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--only-binary=:all:", "--disable-pip-version-check", "--dest", str(dest),
                 *requirements],
                check=True,
            )
            done.touch()
    found = []
    for requirement in requirements:
        stem = canonicalize_name(Requirement(requirement).name).replace("-", "_")
        found += sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(stem + "-"))[-1:]
    return found


def make_eb_python() -> Path:
    """This Python under a prefix of its own, with EasyBuild's sitecustomize.py."""
    from easybuild.easyblocks.p.python import SITECUSTOMIZE

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    root = cache_dir() / "doctor" / f"eb-python-{_key(sys.executable, SITECUSTOMIZE)}"
    with cache_lock(f"doctor-{root.name}"):
        if (root / ".complete").exists():
            return root / "bin" / "python"
        shutil.rmtree(root, ignore_errors=True)
        (root / "bin").mkdir(parents=True)
        # A copy, not a symlink: Python finds its prefix from where the executable lies.
        executable = root / "bin" / f"python{PYTHON_VERSION}"
        shutil.copy2(os.path.realpath(sys.executable), executable)
        (root / "bin" / "python").symlink_to(executable.name)
        lib = root / "lib" / f"python{PYTHON_VERSION}"
        (lib / "site-packages").mkdir(parents=True)
        for entry in stdlib.iterdir():
            if entry.name != "site-packages":
                (lib / entry.name).symlink_to(entry)
        (lib / "site-packages" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (root / ".complete").touch()
    return root / "bin" / "python"


def module_prefix(parent: Path, site_packages: Path) -> Path:
    """An install prefix as EasyBuild lays it out, its site-packages being `site_packages`."""
    prefix = parent / "PyTorch-prefix"
    target = prefix / "lib" / f"python{PYTHON_VERSION}" / "site-packages"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(site_packages)
    return prefix


def clean_environ(**extra: str) -> dict[str, str]:
    """The test process's environment without module, Python-path and CUDA variables."""
    dropped = ("PYTHONPATH", "EBPYTHONPREFIXES", "LOADEDMODULES", "LD_LIBRARY_PATH", "CUDA_HOME",
               "CUDA_PATH", "CXX", "PYTHONUSERBASE")
    env = {k: v for k, v in os.environ.items()
           if k not in dropped and not k.startswith(("EBROOT", "EBVERSION"))}
    env.update(extra)
    return env


def run_doctor(args: Sequence[str], environ: Mapping[str, str],
               python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """`python -m torchstack doctor ARGS` from the repository (which -m finds as the cwd)."""
    return subprocess.run([python, "-m", "torchstack", "doctor", *args], cwd=REPO,
                          env=dict(environ), capture_output=True, text=True, check=False)


# -- reading doctor's report -----------------------------------------------------------------

Factory = Callable[[str], Path]
# doctor's exit code and its JSON report
Diagnosis = tuple[int, dict[str, Any]]
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
CUDNN_FIX = "load cuDNN/9.x or pip install nvidia-cudnn-cu13==9.24.0.43"
FIELD_FIX = "load a CUDA module or set CUDA_HOME, or uninstall ninja"
# The JIT checks ask PATH: /usr/bin has ninja and c++, but not this machine's nvcc.
NINJA_PATH = "/usr/bin:/bin"


def doctor(python: Path, environ: dict[str, str], *extra: str) -> Diagnosis:
    """Run `doctor --json --python PYTHON`; the exit code and the parsed report."""
    run = run_doctor(["--json", "--python", str(python), *extra], environ)
    assert run.returncode in (0, 1), run.stderr
    return run.returncode, json.loads(run.stdout)


def findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def one(report: dict[str, Any], code: str, contains: str = "") -> dict[str, Any]:
    matching = [f for f in findings(report, code) if contains in f["message"]]
    assert len(matching) == 1, (code, contains, report["findings"])
    return matching[0]


def library(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [row for row in report["libraries"] if row["name"] == name]


def no_cuda(tmp_path: Path) -> str:
    """A default toolkit folder that does not exist (this machine has /usr/local/cuda)."""
    return str(tmp_path / "no-cuda")
