"""What provides a missing shared library: an EasyBuild module, the wheel torch pins, torch.

libcudnn.so.9 comes from a cuDNN/9.x module or from the nvidia-cudnn-cu13 wheel at the exact
version torch's metadata pins; libcublas.so.13 from a CUDA/13.x module or cuda-toolkit's
cublas extra; libtorch_cuda.so only from a CUDA build of torch.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence

from torchstack import cudalibs
from torchstack.elf import symbols
from torchstack.fingerprint.read import Fingerprint

_STEM = re.compile(r"^(.+?)\.so(?:\.(\d+))?")
_EXTRA_OF = {project: extra for extra, project in cudalibs.TOOLKIT_EXTRAS.items()}


def library_for(soname: str) -> tuple[str, cudalibs.Library] | None:
    """The CUDA-ecosystem wheel project and library a soname belongs to, by the longest
    matching stem (libcusparseLt.so.0 is cuSPARSELt's, not cuSPARSE's)."""
    match = _STEM.match(soname)
    if match is None:
        return None
    stem = match.group(1)
    candidates = [(project, lib) for project, lib in cudalibs.LIBRARIES.items()
                  if lib.stem and stem.startswith(lib.stem)]
    return max(candidates, key=lambda c: len(c[1].stem or ""), default=None)


def library_fix(soname: str, provider: Fingerprint | None, torch_requires: Sequence[str],
                python_version: str, needers: Sequence[str] = ()) -> str:
    """One line: what to load or install so that `soname` is found."""
    if symbols.torch_libraries([soname]):
        return _torch_library_fix(soname, provider, needers)
    found = library_for(soname)
    if found is None:
        return (f"load the module that provides {soname}, or add the folder that holds it "
                "to LD_LIBRARY_PATH")
    project, library = found
    pin = _pin_for(library, torch_requires, python_version)
    module = _module(soname, library, provider, pin)
    if pin is None:
        return f"load {module}"
    return f"load {module} or pip install {_pip_argument(pin, project)}"


def _torch_library_fix(soname: str, provider: Fingerprint | None, needers: Sequence[str]) -> str:
    if provider is None:
        return "load a PyTorch module, or pip install torch"
    users = ", ".join(needers) or "the packages that need it"
    if provider.torch.flavour == "cpu" and "cuda" in soname:
        return (f"{soname} comes only with CUDA builds of torch and torch {provider.version} is "
                f"CPU-only: install builds of {users} for torch {provider.version}, "
                "or use a CUDA build of torch")
    return f"{soname} should come with torch {provider.version}: reinstall torch"


def _module(soname: str, library: cudalibs.Library, provider: Fingerprint | None,
            pin: cudalibs.Pin | None) -> str:
    """cuDNN/9.x, cuSPARSELt/0.8.x, or CUDA/13.x for the toolkit of torch's CUDA major."""
    match = _STEM.match(soname)
    soname_major = match.group(2) if match else None
    if library.own_series:
        series = _series(pin.version) if pin else soname_major and f"{soname_major}.x"
    elif provider is not None and provider.torch.cuda:
        series = f"{provider.torch.cuda.split('.')[0]}.x"
    elif pin is not None and pin.project == cudalibs.TOOLKIT:
        series = _series(pin.version)
    else:  # only libcudart's soname major is the CUDA major
        series = f"{soname_major}.x" if library.stem == "libcudart" and soname_major else None
    return f"{library.module}/{series}" if series else library.module


def _series(version: str) -> str:
    """9.24.0.43 -> 9.x; 0.8.1 -> 0.8.x (a 0.x series changes its ABI with the minor)."""
    parts = version.split(".")
    return f"{parts[0]}.{parts[1]}.x" if parts[0] == "0" and len(parts) > 1 else f"{parts[0]}.x"


def _pin_for(library: cudalibs.Library, torch_requires: Sequence[str],
             python_version: str) -> cudalibs.Pin | None:
    try:
        pins = cudalibs.cuda_pins(torch_requires, python_version, platform.machine())
    except cudalibs.CudaLibsError:
        return None
    return next((p for p in pins if library in p.libraries), None)


def _pip_argument(pin: cudalibs.Pin, project: str) -> str:
    if pin.project == cudalibs.TOOLKIT:
        return f'"{cudalibs.TOOLKIT}[{_EXTRA_OF[project]}]=={pin.version}"'
    return f"{pin.project}=={pin.version}"
