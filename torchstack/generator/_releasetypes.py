"""The types of release resolution: a target platform, a request, and what resolution found
(one project's wheels, one variant's set)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.version import Version

from torchstack import markers, variants, wheeltags
from torchstack.index.protocol import IndexFile

ARCHITECTURES = ("x86_64", "aarch64")


@dataclass(frozen=True)
class Target:
    """One platform a set is built for: a CPython minor version on a manylinux architecture."""

    python: tuple[int, int]
    arch: str
    glibc: tuple[int, int] = (2, 28)

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"

    def misfit(self, filename: str) -> str | None:
        """Why the wheel `filename` cannot be installed on this target, or None."""
        return wheeltags.misfit(filename, self.python, self.arch, self.glibc)

    def applies(self, requirement: Requirement, extras: Iterable[str] = ("",)) -> bool:
        """Whether a Requires-Dist line applies here (Linux, this Python, this arch)."""
        return markers.applies(requirement, markers.for_target(self.python_version, self.arch),
                               extras)


@dataclass(frozen=True)
class Resolved:
    """One project version resolved for a set of targets: its wheel for each architecture."""

    project: str
    version: str  # as the wheel filenames spell it, local tag included: 2.9.1+cu128
    wheels: dict[str, IndexFile]  # architecture -> file
    requires_dist: tuple[str, ...]
    index: str
    why: str = ""  # why this version was chosen, for the report

    @property
    def public_version(self) -> str:
        return Version(self.version).public

    def requirements(self, target: Target, extras: Iterable[str] = ("",)) -> list[Requirement]:
        """The Requires-Dist lines that apply on `target` (markers evaluated)."""
        found = []
        for line in self.requires_dist:
            requirement = markers.parse(line, f"{self.project} {self.version}")
            if requirement is not None and target.applies(requirement, extras):
                found.append(requirement)
        return found


@dataclass(frozen=True)
class VariantSet:
    """A release's wheels of one variant (cpu, cu128, ...) for one Python."""

    variant: str
    python: tuple[int, int]
    torch: Resolved
    companions: tuple[Resolved, ...]
    notes: tuple[str, ...]

    @property
    def cuda(self) -> str | None:
        """CUDA major.minor of a cuXYZ variant: cu128 -> 12.8."""
        parsed = variants.parse(self.variant)
        return parsed.cuda if parsed else None

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(sorted(self.torch.wheels))


@dataclass(frozen=True)
class Request:
    """What to resolve: a torch release for one Python, some architectures and variants."""

    release: str
    python: tuple[int, int]
    architectures: tuple[str, ...] = ARCHITECTURES
    variants: tuple[str, ...] = ()  # empty: every variant the indexes offer
    glibc: tuple[int, int] = (2, 28)

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"

    def targets(self) -> list[Target]:
        return [Target(self.python, arch, self.glibc) for arch in self.architectures]

