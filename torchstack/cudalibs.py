"""CUDA libraries pinned by a torch wheel, satisfied by a site's EasyBuild modules.

A CUDA torch wheel pins exact nvidia-* wheels (cuDNN, NCCL, cuBLAS, ...) or, since CUDA 13,
`cuda-toolkit[cublas,cudart,...]==X`. With `cuda_libs = 'modules'` none of them is installed:
each pin is matched to the module that provides the library, its real version is checked
against the pin, and a dist-info says which module stands in for the wheel.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torchstack import markers
from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)


class CudaLibsError(TorchstackError):
    """A pinned CUDA library that no dependency module provides, or provides in a bad version."""


@dataclass(frozen=True)
class Library:
    """A library of the CUDA ecosystem: the module that provides it and its file name stem."""

    module: str
    stem: str | None  # libcudnn.so -> "libcudnn"; None for header-only packages (nvtx)
    own_series: bool  # versioned on its own (cuDNN 9.x), not with the CUDA toolkit


# Wheel projects (without -cu12/-cu13) and the cuda-toolkit extras they correspond to.
LIBRARIES: Mapping[str, Library] = {
    "nvidia-cudnn": Library("cuDNN", "libcudnn", True),
    "nvidia-nccl": Library("NCCL", "libnccl", True),
    "nvidia-cusparselt": Library("cuSPARSELt", "libcusparseLt", True),
    "nvidia-nvshmem": Library("NVSHMEM", "libnvshmem_host", True),
    "nvidia-cudss": Library("cuDSS", "libcudss", True),
    "nvidia-cuda-runtime": Library("CUDA", "libcudart", False),
    "nvidia-cublas": Library("CUDA", "libcublas", False),
    "nvidia-cufft": Library("CUDA", "libcufft", False),
    "nvidia-curand": Library("CUDA", "libcurand", False),
    "nvidia-cusolver": Library("CUDA", "libcusolver", False),
    "nvidia-cusparse": Library("CUDA", "libcusparse", False),
    "nvidia-cufile": Library("CUDA", "libcufile", False),
    "nvidia-nvjitlink": Library("CUDA", "libnvJitLink", False),
    "nvidia-cuda-nvrtc": Library("CUDA", "libnvrtc", False),
    "nvidia-cuda-cupti": Library("CUDA", "libcupti", False),
    "nvidia-nvtx": Library("CUDA", None, False),
}
TOOLKIT_EXTRAS: Mapping[str, str] = {
    "cudart": "nvidia-cuda-runtime", "cublas": "nvidia-cublas", "cufft": "nvidia-cufft",
    "curand": "nvidia-curand", "cusolver": "nvidia-cusolver", "cusparse": "nvidia-cusparse",
    "cufile": "nvidia-cufile", "nvjitlink": "nvidia-nvjitlink", "nvrtc": "nvidia-cuda-nvrtc",
    "cupti": "nvidia-cuda-cupti", "nvtx": "nvidia-nvtx",
}
TOOLKIT = "cuda-toolkit"
_CUDA_SUFFIX = re.compile(r"-cu\d+$")


@dataclass(frozen=True)
class Pin:
    """One pinned requirement of torch on a CUDA wheel, with the libraries it stands for."""

    requirement: str
    project: str
    version: str
    libraries: tuple[Library, ...]

    @property
    def module(self) -> str:
        return self.libraries[0].module


@dataclass(frozen=True)
class Provided:
    """What a dependency module provides: its name, version and install root."""

    name: str
    version: str
    root: Path


def cuda_pins(requires_dist: Iterable[str], python_version: str, arch: str) -> list[Pin]:
    """torch's exact pins on CUDA wheels that apply to that Python on Linux and `arch`."""
    environment = markers.for_target(python_version, arch)
    pins = []
    for line in requires_dist:
        pin = _pin(line, environment)
        if pin is not None:
            pins.append(pin)
    return pins


def _pin(line: str, environment: dict[str, str]) -> Pin | None:
    requirement = markers.parse(line, "torch")
    if requirement is None or not markers.applies(requirement, environment):
        return None
    project = _CUDA_SUFFIX.sub("", canonicalize_name(requirement.name))
    # an exact pin, else the lower bound of a range (torch 2.12: nvidia-cublas>=13.1.0.3,
    # <=13.1.1.3), which a stand-in of that version satisfies and a module must not be below
    exact = [s.version for s in requirement.specifier if s.operator == "=="] or \
        [s.version for s in requirement.specifier if s.operator in (">=", "~=")]
    if project == TOOLKIT:
        libraries = tuple(LIBRARIES[TOOLKIT_EXTRAS[e]] for e in sorted(requirement.extras)
                          if e in TOOLKIT_EXTRAS) or (LIBRARIES["nvidia-cuda-runtime"],)
    elif project in LIBRARIES:
        libraries = (LIBRARIES[project],)
    else:
        return None
    if not exact:
        raise CudaLibsError(f"torch requires {line!r}, neither an exact pin nor a range with a "
                            f"lower bound that can be checked")
    return Pin(line.split(";")[0].strip(), canonicalize_name(requirement.name), exact[0],
               libraries)


def check_pin(pin: Pin, provided: Provided) -> str | None:
    """Why `provided` cannot stand in for `pin`, or None when it can."""
    wanted = _version(pin.version, pin.requirement)
    for library in pin.libraries:
        problem = _check_library(pin, library, wanted, provided)
        if problem:
            return problem
    return None


def _check_library(pin: Pin, library: Library, wanted: Version, provided: Provided) -> str | None:
    who = f"module {provided.name}/{provided.version}"
    if library.stem is None:
        return None
    found = library_files(provided.root, library.stem)
    if not found:
        return f"torch pins {pin.requirement}; {who} has no {library.stem}.so.*"
    if pin.project == TOOLKIT:  # the toolkit's version is the CUDA version
        return _series_problem(pin, who, f"CUDA {provided.version}", wanted,
                               _version(provided.version, who))
    own = library_version(found)
    if own is None and not library.own_series:
        # cuBLAS, cuFFT ... carry their own numbers, unrelated to the CUDA module's version.
        log.debug("%s: no version in the file name of %s; presence checked", who, found[0])
        return None
    text = own or provided.version
    return _series_problem(pin, who, f"{library.stem} {text}", wanted, _version(text, who))


def series_problem(have: Version, wanted: Version) -> Literal["another series", "older"] | None:
    """The CUDA series rule (docs/design.rst, "The CUDA series rule"), for the easyblock and
    the generator alike: a library of version
    `have` stands in for a pin on `wanted` when it is of the same major (the same minor too for
    0.x: cuSPARSELt 0.7 and 0.8 are not interchangeable) and not older in major.minor."""
    if have.major != wanted.major or (wanted.major == 0 and have.minor != wanted.minor):
        return "another series"
    if have.release[:2] < wanted.release[:2]:
        return "older"
    return None


def _series_problem(pin: Pin, who: str, what: str, wanted: Version, have: Version) -> str | None:
    problem = series_problem(have, wanted)
    if problem == "another series":
        return f"torch pins {pin.requirement}; {who} provides {what}, another major"
    if problem == "older":
        return f"torch pins {pin.requirement}; {who} provides {what}, older than the pin"
    return None


def library_files(root: Path, stem: str) -> list[Path]:
    """`stem`.so.N* files in the lib folders of a module's root, most specific name first."""
    found: list[Path] = []
    for folder in (root / "lib64", root / "lib"):
        if folder.is_dir():
            found += sorted(folder.glob(f"{stem}.so.*"), key=lambda p: -len(p.name))
    return found


def library_version(files: list[Path]) -> str | None:
    """The full version in a library's real file name (libcudnn.so.9.24.0 -> 9.24.0)."""
    for path in files:
        real = os.path.basename(os.path.realpath(path))
        match = re.search(r"\.so\.(\d+(?:\.\d+)+)$", real)
        if match:
            return match.group(1)
    return None


def _version(text: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise CudaLibsError(f"{where}: {text!r} is not a version") from exc


def match_modules(pins: list[Pin], provided: Mapping[str, Provided]) -> list[tuple[Pin, Provided]]:
    """Each pin with the dependency module that provides it; every missing one at once."""
    missing = sorted({p.module for p in pins if p.module not in provided})
    if missing:
        names = ", ".join(f"{p.requirement} ({p.module})" for p in pins if p.module in missing)
        raise CudaLibsError(
            f"cuda_libs = 'modules', but no dependency provides {', '.join(missing)}, "
            f"which torch pins: {names}"
        )
    return [(p, provided[p.module]) for p in pins]


def write_stand_in(site_packages: Path, pin: Pin, provided: Provided) -> Path:
    """A dist-info that satisfies `pip check` for `pin` and says which module provides it."""
    name = pin.project.replace("-", "_")
    dist_info = site_packages / f"{name}-{pin.version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    summary = f"provided by the EasyBuild module {provided.name}/{provided.version} (torchstack)"
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {pin.project}\nVersion: {pin.version}\n"
                    f"Summary: {summary}\n",
        "INSTALLER": "torchstack\n",
        "PROVIDED_BY": f"{provided.name}/{provided.version} {provided.root}\n",
    }
    for filename, text in files.items():
        (dist_info / filename).write_text(text, encoding="utf-8")
    record = "".join(f"{dist_info.name}/{f},,\n" for f in [*files, "RECORD"])
    (dist_info / "RECORD").write_text(record, encoding="utf-8")
    log.debug("%s stands in for %s", dist_info, pin.requirement)
    return dist_info


def plan_with_modules(
    requires_dist: Iterable[str], python_version: str, arch: str,
    provided: Mapping[str, Provided],
) -> list[tuple[Pin, Provided]]:
    """Each CUDA pin of torch with the module that satisfies it; raises with every problem."""
    pairs = match_modules(cuda_pins(requires_dist, python_version, arch), provided)
    problems = [p for p in (check_pin(pin, module) for pin, module in pairs) if p]
    if problems:
        raise CudaLibsError("; ".join(problems))
    return pairs


def write_stand_ins(site_packages: Path, pairs: list[tuple[Pin, Provided]]) -> list[str]:
    """Write the stand-in dist-infos of a plan; one line per pin for the build log."""
    for pin, module in pairs:
        write_stand_in(site_packages, pin, module)
    return [f"{pin.requirement} <- {module.name}/{module.version}" for pin, module in pairs]


def wheel_projects(names: Iterable[str]) -> list[str]:
    """The names among `names` that are CUDA library wheels (nvidia-*, cuda-toolkit)."""
    found = []
    for name in names:
        project = _CUDA_SUFFIX.sub("", canonicalize_name(name))
        if project in LIBRARIES or project == TOOLKIT:
            found.append(name)
    return found


def plan_for_wheels(
    wheels: Iterable[str], python_version: str, arch: str, provided: Mapping[str, Provided]
) -> list[tuple[Pin, Provided]]:
    """The module plan for the torch wheel among `wheels`; empty when there is none."""
    from torchstack.distributions import open_wheel

    torch_wheels = [w for w in wheels if os.path.basename(w).startswith("torch-")]
    if not torch_wheels:
        return []
    with open_wheel(Path(torch_wheels[0])) as torch:
        return plan_with_modules(torch.requires_dist, python_version, arch, provided)
