"""The CUDA modules of a generated CUDA set: the toolkit it depends on, and whether the site's
library modules (cuDNN, NCCL, ...) can stand in for the nvidia-* wheels torch pins.

Every `-CUDA-x` PyTorch and Triton module depends on a CUDA module, as upstream's do: nvcc,
ptxas, the headers and CUDA_HOME are what JIT-compiled extensions and Triton need at run time,
whichever way the libraries come. `cuda_libs = 'auto'` takes the modules when the robot path
has every library module, built with that CUDA, in a version that satisfies torch's pin, and
the wheels otherwise; each pin's verdict is kept for the report. Both choices apply
cudalibs.series_problem (docs/design.rst, "The CUDA series rule").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from torchstack import cudalibs
from torchstack.errors import TorchstackError
from torchstack.generator import render, suffixes
from torchstack.generator._ebconfig import compare_versions
from torchstack.generator.toolchains import Dependency, Toolchain

MODES = ("auto", "wheels", "modules")


class CudaModulesError(TorchstackError):
    """A CUDA set that the robot path's modules cannot serve as asked."""


@dataclass(frozen=True)
class CudaChoice:
    """Where a CUDA set's libraries come from, and why."""

    cuda_libs: str  # 'wheels' or 'modules'
    cuda: Dependency  # the CUDA module every -CUDA-x module depends on
    libraries: tuple[Dependency, ...]  # with 'modules': cuDNN, NCCL, ... built with that CUDA
    reasons: tuple[str, ...]  # one line a pinned library module

    def dependencies(self, provider: bool) -> list[str]:
        """CUDA, for every -CUDA-x module; the library modules too for the torch provider,
        with 'modules' (named with the CUDA suffix of the provider's own CUDA)."""
        deps = [render.module_dependency(self.cuda, "")]
        if provider:
            deps += [render.module_dependency(d, suffixes.CUDA_TEMPLATE) for d in self.libraries]
        return deps


def cuda_module(toolchain: Toolchain, cuda: str) -> Dependency:
    """The CUDA module for a variant's CUDA major.minor ('12.8'): the newest 12.8.x, else the
    nearest newer 12.y (a newer minor of the same major serves the wheels; nvcc must match the
    major only); CudaModulesError when the robot path has neither."""
    exact = toolchain.find("CUDA", version_prefix=f"{cuda}.")
    if exact is not None:
        return exact
    wanted = Version(cuda)
    newer = [d for d in toolchain.every("CUDA")
             if not d.versionsuffix and _same_major_newer(d.version, wanted)]
    if not newer:
        raise CudaModulesError(f"no CUDA {wanted.major}.x module (at least {cuda}) for "
                               f"{toolchain.spec} in the robot path")
    nearest = newer[0]
    for candidate in newer[1:]:
        if compare_versions(candidate.version, nearest.version) < 0:
            nearest = candidate
    return nearest


def _same_major_newer(version: str, wanted: Version) -> bool:
    try:
        have = Version(version)
    except InvalidVersion:
        return False
    return cudalibs.series_problem(have, wanted) is None


def choose(toolchain: Toolchain, pins: Sequence[cudalibs.Pin], cuda: Dependency,
           wanted: str) -> CudaChoice:
    """The cuda_libs mode for a set whose torch has `pins` ('auto' decides; 'modules' raises
    CudaModulesError naming every pin the robot path cannot serve)."""
    if wanted not in MODES:
        raise CudaModulesError(f"cuda_libs {wanted!r} is not one of {', '.join(MODES)}")
    if wanted == "wheels":
        return CudaChoice("wheels", cuda, (), ("asked for",))
    found: list[Dependency] = []
    reasons: list[str] = []
    problems = 0
    for module in sorted({lib.module for pin in pins for lib in pin.libraries} - {"CUDA"}):
        module_pins = [p for p in pins if p.module == module]
        chosen, reason = _library_module(toolchain, module, module_pins, cuda)
        reasons.append(reason)
        if chosen is None:
            problems += 1
        else:
            found.append(chosen)
    for pin in (p for p in pins if p.module == "CUDA"):
        reason = _toolkit_reason(pin, cuda)
        problems += not reason.startswith("ok: ")
        reasons.append(reason)
    if problems and wanted == "modules":
        raise CudaModulesError("cuda_libs='modules' cannot be served by the robot path: "
                               + "; ".join(r for r in reasons if not r.startswith("ok: ")))
    if problems:
        return CudaChoice("wheels", cuda, (), tuple(reasons))
    return CudaChoice("modules", cuda, tuple(found), tuple(reasons))


def _library_module(toolchain: Toolchain, module: str, pins: Sequence[cudalibs.Pin],
                    cuda: Dependency) -> tuple[Dependency | None, str]:
    """The newest `module` built with `cuda` if it satisfies every pin, and the verdict."""
    suffix = suffixes.cuda(cuda.version)
    every = toolchain.every(module)
    built = [d for d in every if d.versionsuffix == suffix]
    newest = built[0] if built else None
    for candidate in built[1:]:
        if compare_versions(candidate.version, newest.version) > 0:  # type: ignore[union-attr]
            newest = candidate
    pinned = ", ".join(p.requirement for p in pins)
    major = cuda.version.split(".")[0]
    has = ", ".join(f"{d.version} ({d.versionsuffix.lstrip('-')})" for d in every
                    if d.versionsuffix.startswith(suffixes.cuda(f"{major}."))) or "no version"
    if newest is None:
        return None, (f"{pinned}: needs {module} built with CUDA {cuda.version}; "
                      f"the robot path has {module} {has} for CUDA {major}")
    problems = [p for p in (_series(pin, newest.version) for pin in pins) if p]
    if problems:
        return None, (f"{pinned}: {module} {newest.version} ({suffix.lstrip('-')}) is "
                      f"{'; '.join(problems)}; the robot path has {module} {has} for CUDA {major}")
    return newest, f"ok: {pinned}: {module} {newest.version} ({suffix.lstrip('-')})"


def _series(pin: cudalibs.Pin, version: str) -> str | None:
    """Why a library module's version cannot stand in for `pin` (cudalibs.series_problem)."""
    try:
        have, wanted = Version(version), Version(pin.version)
    except InvalidVersion:
        return f"not comparable with {pin.version}"
    problem = cudalibs.series_problem(have, wanted)
    if problem == "another series":
        return f"another series than {pin.version}"
    if problem == "older":
        return f"older than {pin.version}"
    return None


def _toolkit_reason(pin: cudalibs.Pin, cuda: Dependency) -> str:
    """The CUDA module's verdict on a toolkit pin: cuda-toolkit's version is the CUDA version;
    the cu12 wheels of cuBLAS, cuFFT, ... are numbered on their own and come with any CUDA."""
    problem = _series(pin, cuda.version) if pin.project == cudalibs.TOOLKIT else None
    if problem:
        return f"{pin.requirement}: CUDA {cuda.version} is {problem}"
    libraries = ", ".join(lib.stem or "nvtx" for lib in pin.libraries)
    return f"ok: {pin.requirement}: CUDA {cuda.version} ({libraries})"
