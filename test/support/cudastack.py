"""The real torch 2.14.1 CUDA 13 stack of this machine's pip configuration, for eb tests.

`pip download torch==2.14.1` resolves torch's exact pins (cuda-toolkit extras, cuDNN, NCCL,
cuSPARSELt, NVSHMEM, triton, cuda-bindings); the wheels are cached. Stand-in EasyBuild modules
for CUDA, cuDNN, NCCL, ... are made from the same wheels' real libraries.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from support.wheelcache import cache_dir, cache_lock

# What the stand-in Python module already has (ebenv.PYTHON_PACKAGES and their requirements).
IN_PYTHON_MODULE = {"typing-extensions", "sympy", "mpmath", "filelock", "jinja2", "markupsafe",
                    "fsspec", "networkx", "setuptools", "numpy", "pillow"}
# The stack's wheels that hold Python code: all a PyTorch module installs when the CUDA
# libraries come from modules.
PYTHON_WHEELS = ("torch", "triton", "cuda-bindings", "cuda-pathfinder")
# Module name -> the wheels whose nvidia/*/lib folders make up its lib/ folder.
MODULE_WHEELS = {
    "CUDA": ("nvidia-cuda-runtime", "nvidia-cublas", "nvidia-cufft", "nvidia-cufile",
             "nvidia-cuda-cupti", "nvidia-curand", "nvidia-cusolver", "nvidia-cusparse",
             "nvidia-nvjitlink", "nvidia-cuda-nvrtc", "nvidia-nvtx"),
    "cuDNN": ("nvidia-cudnn-cu13",),
    "NCCL": ("nvidia-nccl-cu13",),
    "cuSPARSELt": ("nvidia-cusparselt-cu13",),
    "NVSHMEM": ("nvidia-nvshmem-cu13",),
}
_LIBRARY = re.compile(r"^nvidia/[^/]+/lib/[^/]+\.so(\.\d+)*$")
# EasyBuild's CUDA sanity check runs cuobjdump from the CUDA module, as a site's module has it.
CUOBJDUMP = "nvidia-cuda-cuobjdump==13.2.51"


def download_stack(dest: Path) -> dict[str, Path]:
    """torch 2.14.1 and everything it pins, by canonical project name; downloaded once."""
    if not (dest / ".complete").exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--only-binary=:all:", "--dest", str(dest), "torch==2.14.1"],
            check=True,
        )
        (dest / ".complete").touch()
    wheels = {}
    for wheel in dest.glob("*.whl"):
        name, _, _, _ = parse_wheel_filename(wheel.name)
        wheels[canonicalize_name(name)] = wheel
    return wheels


def wheel_version(wheel: Path) -> str:
    return str(parse_wheel_filename(wheel.name)[1])


def module_versions(wheels: dict[str, Path]) -> dict[str, str]:
    """The version each stand-in module gets: the toolkit's for CUDA, the wheel's otherwise."""
    versions = {"CUDA": wheel_version(wheels["cuda-toolkit"]).removesuffix(".0")}
    for module, projects in MODULE_WHEELS.items():
        if module != "CUDA":
            versions[module] = wheel_version(wheels[projects[0]])
    return versions


def make_module_roots(cache: Path, wheels: dict[str, Path]) -> dict[str, Path]:
    """Install roots with lib/ holding the real libraries of the wheels; made once."""
    roots = {}
    for module, projects in MODULE_WHEELS.items():
        root = cache / module
        roots[module] = root
        if (root / ".complete").exists():
            continue
        shutil.rmtree(root, ignore_errors=True)
        (root / "lib").mkdir(parents=True)
        for project in projects:
            _extract_libraries(wheels[project], root / "lib")
        if module == "CUDA":
            _add_cuobjdump(cache, root / "bin")
        (root / ".complete").touch()
    return roots


def module_roots(wheels: dict[str, Path]) -> dict[str, Path]:
    """The stand-in modules' install roots in the machine's cache, by module name."""
    with cache_lock("cuda-modules"):
        return make_module_roots(cache_dir() / "cuda-modules", wheels)


def write_site_modules(site_modules: Path, wheels: dict[str, Path]) -> list[tuple[str, str]]:
    """Stand-in CUDA, cuDNN, NCCL, cuSPARSELt and NVSHMEM modules with the stack's real
    libraries, written into `site_modules`; their (name, version), as easyconfigs name them."""
    versions = module_versions(wheels)
    for name, root in module_roots(wheels).items():
        write_module(site_modules, name, versions[name], root)
    return sorted(versions.items())


def _extract_libraries(wheel: Path, libdir: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if _LIBRARY.match(member):
                (libdir / Path(member).name).write_bytes(archive.read(member))


def _add_cuobjdump(cache: Path, bindir: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--disable-pip-version-check", "--dest", str(cache / "tools"), CUOBJDUMP],
        check=True,
    )
    bindir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(next((cache / "tools").glob("nvidia_cuda_cuobjdump-*.whl"))) as archive:
        (bindir / "cuobjdump").write_bytes(archive.read("nvidia/cu13/bin/cuobjdump"))
    (bindir / "cuobjdump").chmod(0o755)


def write_module(site_modules: Path, name: str, version: str, root: Path) -> str:
    """A hand-written Lmod module of the kind a site's CUDA or cuDNN module is."""
    variable = name.upper().replace("-", "MIN")
    folder = site_modules / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{version}.lua").write_text(textwrap.dedent(f"""\
        help([[{name} {version}, stand-in module for torchstack tests]])
        setenv("EBROOT{variable}", "{root}")
        setenv("EBVERSION{variable}", "{version}")
        prepend_path("LD_LIBRARY_PATH", "{root / 'lib'}")
        prepend_path("PATH", "{root / 'bin'}")
        """))
    return f"{name}/{version}"
