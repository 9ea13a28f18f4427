"""Variants of a torch build: the local version tag that names what it runs on (cpu, cu128,
rocm6.4, xpu) and the Triton project that goes with each.

The one grammar of a variant tag, used for a wheel's local version (`2.9.1+cu128`), for the
last segment of a variant index's URL (`.../whl/cu128/`) and for the version a consumer records
in its `version.py`. A cuXYZ tag is CUDA X.Y with the last digit the minor (cu128 is 12.8,
cu92 is 9.2); a rocm tag is ROCm with at least major.minor (rocm6.4, rocm6.2.4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

__all__ = ["TRITON_PROJECTS", "Variant", "cuda_tag", "is_triton", "offered_by", "parse"]

_TAG = re.compile(r"^(?:cpu|xpu|cu(\d+)(\d)|rocm(\d+\.\d+(?:\.\d+)*))$")
# The Triton wheel torch requires, of its CUDA, ROCm and XPU builds.
TRITON_PROJECTS = ("triton", "pytorch-triton-rocm", "pytorch-triton-xpu")


@dataclass(frozen=True)
class Variant:
    """A parsed variant tag: cu128 has cuda '12.8', rocm6.2.4 has rocm '6.2.4'."""

    tag: str
    cuda: str | None = None
    rocm: str | None = None

    @property
    def hip(self) -> str | None:
        """The ROCm major.minor (rocm6.2.4 -> 6.2), as torch.version.hip starts."""
        return ".".join(self.rocm.split(".")[:2]) if self.rocm else None


def parse(tag: str) -> Variant | None:
    """The variant a local version tag names, or None when it names none (+git1234, +abc)."""
    match = _TAG.fullmatch(tag)
    if match is None:
        return None
    cuda = f"{match.group(1)}.{match.group(2)}" if match.group(1) else None
    return Variant(tag, cuda, match.group(3))


def offered_by(location: str) -> str | None:
    """The variant an index is dedicated to, from its URL's last segment (.../whl/cu128/);
    None for an index that may offer any (PyPI, a site mirror)."""
    last = location.rstrip("/").rsplit("/", 1)[-1]
    return last if parse(last) is not None else None


def cuda_tag(version: Version) -> str:
    """The cuXY tag of a CUDA runtime version: 12.8.90 -> cu128, 13 -> cu130."""
    release = version.release
    return f"cu{release[0]}{release[1] if len(release) > 1 else 0}"


def is_triton(project: str) -> bool:
    """Whether `project` is one of the Triton wheels a torch variant requires."""
    # here: packaging.tags comes with it, a start-up cost the fingerprint avoids (bench/README.rst)
    from packaging.utils import canonicalize_name

    return canonicalize_name(project) in TRITON_PROJECTS
