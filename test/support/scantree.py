"""A fake EasyBuild install path (the `installpath` fixture): Lua and Tcl module files,
software folders with recorded fingerprints, and one installation without a record whose
site-packages holds a small real wheel, fingerprinted on the fly.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from support.wheelbuild import build_wheel
from torchstack.fingerprint.read import Fingerprint, Link, TorchFacts, abi_tag
from torchstack.guards.record import write_fingerprint

CPU = "PyTorch/2.13.0-whl"
CU13 = "PyTorch/2.14.1-CUDA-13.0-whl"
CU13_SOURCE = "PyTorch/2.14.1-CUDA-13.0"
VISION_CXX = "torchvision/0.28.0-PyTorch-2.13.0-whl"
VISION_STABLE = "torchvision/0.29.1-PyTorch-2.14.1-CUDA-13.0-whl"
LIGHTNING = "lightning/2.6.0-PyTorch-2.13.0-whl"
TORCHDATA = "torchdata/0.11.0-PyTorch-2.13.0-whl"
PYTHON = "Python/3.11.5"
SITE_PACKAGES = "lib/python3.11/site-packages"


# -- fingerprints --------------------------------------------------------------------------


def provider(version: str, cuda: str | None = None) -> Fingerprint:
    release, _, local = version.partition("+")
    torch = TorchFacts(release, local or None, True, cuda, None)
    major = int(cuda.split(".")[0]) if cuda else None
    return Fingerprint("provider", "torch", version, torch, None, None, major,
                       abi_tag("provider", None, torch))


def consumer(
    name: str, version: str, link: Link, requires: str, release: str | None,
    cuda: str | None = None, cxx11_abi: bool | None = None,
) -> Fingerprint:
    local = f"cu{cuda.replace('.', '')}" if cuda else ("cpu" if link == "cxx" else None)
    torch = TorchFacts(release, local, cxx11_abi, cuda, None)
    major = int(cuda.split(".")[0]) if cuda else None
    libraries = ("libc10.so", "libtorch_cpu.so") if link == "cxx" else ()
    return Fingerprint("consumer", name, version, torch, link, requires, major,
                       abi_tag("consumer", link, torch, major), libraries)


RECORDED = {
    CPU: provider("2.13.0+cpu"),
    CU13: provider("2.14.1+cu130", "13.0"),
    CU13_SOURCE: provider("2.14.1", "13.0"),
    VISION_CXX: consumer("torchvision", "0.28.0+cpu", "cxx", "==2.13.0", "2.13.0",
                         cxx11_abi=True),
    VISION_STABLE: consumer("torchvision", "0.29.1+cu130", "stable", ">=2.14.0", "2.14.0",
                            cuda="13.0"),
    LIGHTNING: consumer("lightning", "2.6.0", "python", ">=2.13", None),
}


# -- module files and install paths ----------------------------------------------------------


def lua_module(*loads: str) -> str:
    """A module file as EasyBuild writes it, with loads in the help text and a comment too."""
    body = "".join(
        f'if not ( isloaded("{name}") ) then\n    load("{name}")\nend\n' for name in loads
    )
    return ('help([==[\nDescription: load("Decoy/1.0") is not a dependency\n]==])\n'
            '-- depends_on("Commented/1.0")\n' + body)


def tcl_module(*loads: str, depends_on: bool = False) -> str:
    if depends_on:
        body = "".join(f"depends-on {name}\n" for name in loads)
    else:
        body = "".join(
            f"if {{ ![ is-loaded {name} ] }} {{\n    module load {name}\n}}\n" for name in loads
        )
    return "#%Module\n# module load Commented/1.0\nproc ModulesHelp { } { }\n" + body


MODULES: dict[str, tuple[str, str]] = {  # full name -> (syntax, module file text)
    PYTHON: ("lua", lua_module()),
    CPU: ("lua", lua_module(PYTHON)),
    CU13: ("lua", 'depends_on("Python/3.11.5")\ndepends_on("CUDA/13.0.0")\n'),
    CU13_SOURCE: ("tcl", tcl_module(PYTHON)),
    VISION_CXX: ("lua", lua_module(PYTHON, CPU)),
    VISION_STABLE: ("tcl", tcl_module(CU13)),
    LIGHTNING: ("lua", "load('Python/3.11.5', 'PyTorch/2.13.0-whl')\n"),
    # Runs on PyTorch through torchvision: found breadth-first through the module files.
    TORCHDATA: ("tcl", tcl_module(PYTHON, VISION_CXX, depends_on=True)),
}


def write_module(root: Path, name: str, syntax: str, text: str) -> Path:
    path = root / "modules" / "all" / f"{name}{'.lua' if syntax == 'lua' else ''}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    (root / "software" / name).mkdir(parents=True, exist_ok=True)
    return path


def install_wheel(wheel: Path, software: Path) -> None:
    target = software / SITE_PACKAGES
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)


@pytest.fixture(name="installpath")
def installpath_fixture(tmp_path: Path) -> Path:
    """The whole fake install path: six recorded fingerprints, one on the fly, one no torch."""
    root = tmp_path / "easybuild"
    for name, (syntax, text) in MODULES.items():
        write_module(root, name, syntax, text)
    for name, found in RECORDED.items():
        write_fingerprint(root / "software" / name, found)
    wheel = build_wheel(tmp_path, "torchdata", "0.11.0", {"torchdata/__init__.py": b""},
                        requires=("torch<2.14,>=2.12", "numpy"))
    install_wheel(wheel, root / "software" / TORCHDATA)
    (root / "modules" / "all" / "PyTorch" / ".modulerc.lua").write_text(
        'module_version("PyTorch/2.13.0-whl", "default")\n', encoding="utf-8")
    return root
