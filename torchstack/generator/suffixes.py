"""The version suffixes of generated modules, as EasyBuild spells them: `-whl` for a wheel
build, `-CUDA-12.8.0-whl` for one that depends on a CUDA module, `-CUDA-12.8.0` for any module
built with that CUDA (upstream's source builds, cuDNN, NCCL)."""

from __future__ import annotations

WHEELS = "-whl"
# How a dependency names the CUDA suffix of the CUDA its parent depends on.
CUDA_TEMPLATE = "-CUDA-%(cudaver)s"


def cuda(version: str) -> str:
    """The suffix of a module built with CUDA `version` (12.8.0 -> -CUDA-12.8.0)."""
    return f"-CUDA-{version}"


def wheels(cuda_version: str | None) -> str:
    """-whl, or -CUDA-12.8.0-whl for a wheel module that depends on CUDA `cuda_version`."""
    return cuda(cuda_version) + WHEELS if cuda_version else WHEELS
