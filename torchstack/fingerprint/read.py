"""The fingerprint of a PyTorch provider or consumer: what libtorch it is or needs.

Read from a wheel file, a site-packages folder or an install prefix, from metadata, from
`torch/version.py` (parsed, never imported) and from ELF symbols. The JSON form is a
contract shared with the easyblocks, the hooks and the module guards (docs/design.rst,
"The fingerprint").
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import InvalidVersion, Version

from torchstack._files import describe_os_error, kind_of
from torchstack.distributions import (
    Distribution,
    DistributionError,
    open_wheel,
    site_packages_of,
    tree_distributions,
)
from torchstack.elf import linkclass, reader, symbols
from torchstack.elf.linkclass import Link, LinkEvidence
from torchstack.errors import TorchstackError
from torchstack.fingerprint import _version_py

if TYPE_CHECKING:
    from packaging.requirements import Requirement

log = logging.getLogger(__name__)

SCHEMA = 1
Role = Literal["provider", "consumer"]
# how tightly a link class ties a consumer to one torch build: an installation without torch
# is fingerprinted as its most tightly linked consumer (`strongest`), here alone
_LINK_STRENGTH = {"python": 0, "stable": 1, "cxx": 2}
_TORCH_LIB_DIR = "torch/lib/"


class FingerprintError(TorchstackError):
    """A fingerprint that cannot be read, or a JSON fingerprint that breaks the contract."""


@dataclass(frozen=True)
class TorchFacts:
    """A torch build: a provider's own, or the one a consumer was built against."""

    release: str | None
    local: str | None
    cxx11_abi: bool | None
    cuda: str | None
    hip: str | None

    @property
    def flavour(self) -> str:
        """cpu, cuN or rocmX.Y: what a binary built against this torch needs at run time."""
        if self.hip:
            return "rocm" + ".".join(self.hip.split(".")[:2])
        if self.cuda:
            return "cu" + self.cuda.split(".")[0]
        return "cpu"


@dataclass(frozen=True)
class Fingerprint:
    """The contract object of docs/design.rst, "The fingerprint", with `torch_libraries` and
    `registers_kernels`."""

    role: Role
    name: str
    version: str
    torch: TorchFacts
    link: Link | None
    requires_torch: str | None
    cuda_major: int | None
    abi_tag: str
    torch_libraries: tuple[str, ...] = field(default=())
    # consumers: whether their binaries register kernels through libtorch's C++ dispatcher
    # (TORCH_LIBRARY), which binds them to the release they were built on; None: not read
    registers_kernels: bool | None = None
    # consumers: the clauses their guards evaluate, recorded with the fingerprint
    # (`compat.recorded`); None when not recorded, as in a file that predates them. Not one of
    # its facts: equality ignores it.
    guard_clauses: tuple[str, ...] | None = field(default=None, compare=False)
    schema: int = SCHEMA

    @property
    def links_gpu(self) -> bool | None:
        """Whether a consumer's binaries link a CUDA or HIP library (libcudart, libc10_cuda,
        libtorch_cuda, libtorch_hip, ...); None when its libtorch libraries were not recorded.

        One that links none runs on a GPU torch of its release and C++ ABI: CUDA stays inside
        torch's own libraries (torchcodec's CPU builds on PyPI's CUDA torch).
        """
        if self.cuda_major is not None or any(symbols.is_gpu_library(lib)
                                              for lib in self.torch_libraries):
            return True
        return False if self.torch_libraries else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["torch_libraries"] = list(self.torch_libraries)
        if self.guard_clauses is None:
            del data["guard_clauses"]
        else:
            data["guard_clauses"] = list(self.guard_clauses)
        order = ("schema", "role", "name", "version", "torch", "link", "requires_torch")
        return {k: data[k] for k in order} | {k: v for k, v in data.items() if k not in order}


def fingerprint_path(path: str | Path) -> Fingerprint:
    """Fingerprint a .whl file, a site-packages folder or an install prefix."""
    target = Path(path)
    name = str(target)
    try:
        mode = os.stat(target).st_mode
    except OSError as exc:
        raise FingerprintError(describe_os_error(name, exc)) from exc
    if stat.S_ISDIR(mode):
        return fingerprint_distributions(_tree(target), name)
    if not stat.S_ISREG(mode):
        raise FingerprintError(f"{name!r} is {kind_of(mode)}, not a file or folder")
    if target.suffix != ".whl":
        raise FingerprintError(f"{name!r} is not a .whl file, a site-packages folder or a prefix")
    try:
        with open_wheel(target) as dist:
            return fingerprint_distributions([dist], name)
    except OSError as exc:
        raise FingerprintError(f"{name!r}: {exc.strerror or exc}") from exc


def installation_fingerprints(path: str | Path) -> tuple[Fingerprint | None, list[Fingerprint]]:
    """The provider (if torch is installed there) and every consumer of an installation."""
    dists = _tree(Path(path))
    providers = [provider_fingerprint(d) for d in dists if d.key == "torch"]
    consumers = [c for c in (consumer_fingerprint(d) for d in dists if d.key != "torch") if c]
    return (providers[0] if providers else None), consumers


def _tree(target: Path) -> list[Distribution]:
    try:
        return [d for sp in site_packages_of(target) for d in tree_distributions(sp)]
    except OSError as exc:
        raise FingerprintError(f"{str(target)!r}: {exc.strerror or exc}") from exc


def fingerprint_distributions(dists: list[Distribution], label: str) -> Fingerprint:
    """The provider fingerprint if torch is among `dists`, else the strongest consumer's."""
    for dist in dists:
        if dist.key == "torch":
            return provider_fingerprint(dist)
    found = strongest(c for c in (consumer_fingerprint(d) for d in dists) if c is not None)
    if found is None:
        raise FingerprintError(f"{label!r}: no distribution contains torch or depends on it")
    return found


def strongest(consumers: Iterable[Fingerprint]) -> Fingerprint | None:
    """The most tightly linked consumer (cxx, then stable, then python), the first of equals;
    None when there is none."""
    return max(consumers, key=_strength, default=None)


def _strength(consumer: Fingerprint) -> int:
    return _LINK_STRENGTH[consumer.link or "python"]


# -- providers ---------------------------------------------------------------------------


def provider_fingerprint(dist: Distribution) -> Fingerprint:
    """Fingerprint torch itself: version.py for the release and CUDA, libc10 for the ABI."""
    where = dist.describe("torch/version.py")
    if not dist.files.exists("torch/version.py"):
        raise FingerprintError(f"{where!r} is missing")
    facts = parse_version_py(dist.files.text("torch/version.py"), where)
    full_version = _str_fact(facts, "__version__", where)
    release, local = _split_version(full_version, where)
    try:  # `cuda = 12` is CUDA 12; `cuda = "abc"` is refused, never read as CPU-only
        cuda = _version_py.runtime_version(facts.get("cuda"), "cuda", where)
        hip = _version_py.runtime_version(facts.get("hip"), "hip", where)
    except _version_py.VersionPyError as exc:
        raise FingerprintError(str(exc)) from exc
    torch = TorchFacts(
        release=release, local=local, cxx11_abi=_provider_abi(dist), cuda=cuda, hip=hip
    )
    cuda_major = _provider_cuda_major(dist, torch)
    return Fingerprint(
        role="provider",
        name=dist.name,
        version=full_version,
        torch=torch,
        link=None,
        requires_torch=None,
        cuda_major=cuda_major,
        abi_tag=abi_tag("provider", None, torch),
    )


def parse_version_py(text: str, where: str = "version.py") -> dict[str, object]:
    """Module-level constant assignments of a version.py, without executing it.

    A name assigned anything but a constant maps to `_version_py.NOT_CONSTANT`; `where`
    names the file in the error for a file that does not parse.
    """
    try:
        return _version_py.parse(text, where)
    except _version_py.VersionPyError as exc:
        raise FingerprintError(str(exc)) from exc


def _provider_abi(dist: Distribution) -> bool | None:
    for library in ("libc10.so", "libtorch_cpu.so"):
        relpath = _TORCH_LIB_DIR + library
        if not dist.files.exists(relpath):
            continue
        with dist.files.open_binary(relpath) as stream:
            found = reader.defined_symbols(stream, dist.describe(relpath), symbols.ABI_PROBES)
        abi = symbols.abi_from_probes(found)
        log.debug("%s: C++11 ABI %s from %s", dist.name, abi, sorted(found))
        if abi is not None:
            return abi
    return None


def _provider_cuda_major(dist: Distribution, torch: TorchFacts) -> int | None:
    relpath = _TORCH_LIB_DIR + "libc10_cuda.so"
    if dist.files.exists(relpath):
        with dist.files.open_binary(relpath) as stream:
            needed = reader.read_dynamic(stream, dist.describe(relpath)).needed
            major = symbols.cuda_major_of(needed)
        if major is not None:
            return major
    return int(torch.cuda.split(".")[0]) if torch.cuda else None


# -- consumers ---------------------------------------------------------------------------


def consumer_fingerprint(dist: Distribution,
                         evidence: LinkEvidence | None = None) -> Fingerprint | None:
    """Fingerprint a distribution that depends on torch; None when it does not.

    `evidence`: its shared objects as read elsewhere (by range reads of a remote wheel);
    by default they are read from `dist` itself.
    """
    requirement = torch_requirement(dist)
    evidence = scan_binaries(dist) if evidence is None else evidence
    libraries = tuple(evidence.torch_libraries)
    if requirement is None and not evidence.binds_torch:
        return None
    link = evidence.link
    cuda_major = evidence.cuda_major
    specifier = str(requirement.specifier) if requirement is not None else ""
    torch = _consumer_torch(dist, link, specifier, evidence, cuda_major)
    return Fingerprint(
        role="consumer",
        name=dist.name,
        version=dist.version,
        torch=torch,
        link=link,
        requires_torch=specifier,
        cuda_major=cuda_major,
        abi_tag=abi_tag("consumer", link, torch, cuda_major),
        torch_libraries=libraries,
        registers_kernels=evidence.registers_kernels,
    )


def torch_requirement(dist: Distribution) -> Requirement | None:
    """The unconditional (no extra) Requires-Dist on torch, None when there is none."""
    # Imported here: only consumers need it, and packaging.requirements is a large part of a
    # provider fingerprint's time (bench/README.rst).
    from torchstack import markers

    for line in dist.requires_dist:
        requirement = markers.parse(line, dist.name)
        if requirement is None:
            continue
        if requirement.name.lower() == "torch" and "extra" not in str(requirement.marker or ""):
            log.debug("%s: requires %r", dist.name, line)
            return requirement
    return None


def scan_binaries(dist: Distribution) -> LinkEvidence:
    """The libtorch bindings of a distribution's shared objects, read from its files."""
    evidence = LinkEvidence()
    for relpath in shared_objects(dist):
        if linkclass.is_bundled(relpath):
            evidence.add_bundled(relpath)
            continue
        with dist.files.open_binary(relpath) as stream:
            label = dist.describe(relpath)
            needed = reader.read_dynamic(stream, label).needed
            found = reader.bindings(stream, label)
        evidence.add(linkclass.ObjectSymbols(label, frozenset(needed), found.undefined,
                                             found.weak, found.exports))
    return evidence


def shared_objects(dist: Distribution) -> list[str]:
    """Paths (relative to site-packages) of the distribution's shared objects."""
    return [p for p in dist.listing() if symbols.is_shared_object(p) and dist.files.exists(p)]


def _consumer_torch(
    dist: Distribution, link: Link, specifier: str, evidence: LinkEvidence, cuda_major: int | None
) -> TorchFacts:
    from torchstack import variants  # here: a provider's fingerprint needs no variant

    local = _consumer_variant(dist)
    variant = variants.parse(local) if local else None
    cuda = variant.cuda if variant else None
    if cuda is None and cuda_major is not None:
        cuda = str(cuda_major)
    return TorchFacts(
        release=_stable_floor(built_against_release(specifier, link), link, evidence),
        local=local,
        cxx11_abi=evidence.cxx11_abi() if link == "cxx" else None,
        cuda=cuda,
        hip=variant.hip if variant else None,
    )


def built_against_release(specifier: str, link: Link) -> str | None:
    """The torch release a consumer targets as far as its requirement shows."""
    from packaging.specifiers import SpecifierSet

    for spec in SpecifierSet(specifier):
        if spec.operator in ("==", "===") and "*" not in spec.version:
            release = spec.version.split("+")[0]
            with contextlib.suppress(InvalidVersion):  # `===` takes any string
                Version(release)
                return release
    if link == "stable":
        lower = [s.version for s in SpecifierSet(specifier) if s.operator in (">=", "~=")]
        if lower:
            return max(lower, key=Version)
    return None


def _stable_floor(release: str | None, link: Link, evidence: LinkEvidence) -> str | None:
    """A stable consumer needs a torch with every C shim it imports: the release its
    requirement names, raised to the release that introduced its newest shim."""
    floor = evidence.minimum_torch() if link == "stable" else None
    if floor is None or (release is not None and Version(release) >= Version(floor)):
        return release
    log.debug("C shims need torch %s, more than the requirement's %s", floor, release)
    return floor


def _consumer_variant(dist: Distribution) -> str | None:
    """The variant local tag (cpu, cu130, rocm6.4) of a consumer, from its version.py."""
    relpath = f"{dist.key.replace('-', '_')}/version.py"
    version = dist.version
    if dist.files.exists(relpath):
        text = dist.files.text(relpath)
        value = parse_version_py(text, dist.describe(relpath)).get("__version__")
        version = value if isinstance(value, str) else version
    from torchstack import variants

    local = version.partition("+")[2]
    return local if variants.parse(local) is not None else None


# -- tags and JSON -----------------------------------------------------------------------


def abi_tag(role: Role, link: Link | None, torch: TorchFacts, cuda_major: int | None = None) -> str:
    """The short string module guards compare, e.g. torch-2.14.1-cxx11-cu13."""
    if role == "consumer" and link == "python":
        return "torch-python"
    flavour = runtime_flavour(torch, cuda_major)
    release = torch.release or "unknown"
    if role == "consumer" and link == "stable":
        return f"torch-{release}-stable-{flavour}"
    abi = {True: "cxx11", False: "precxx11", None: "unknownabi"}[torch.cxx11_abi]
    return f"torch-{release}-{abi}-{flavour}"


def runtime_flavour(torch: TorchFacts, cuda_major: int | None) -> str:
    """The flavour a binary needs: its torch's, or CUDA when its own code links libcudart."""
    if torch.flavour == "cpu" and cuda_major is not None:
        return f"cu{cuda_major}"
    return torch.flavour


def _split_version(text: str, where: str) -> tuple[str, str | None]:
    try:
        version = Version(text)
    except InvalidVersion as exc:
        raise FingerprintError(f"{where!r}: invalid __version__ {text[:60]!r}") from exc
    return version.public, version.local


def _str_fact(facts: dict[str, object], key: str, where: str) -> str:
    value = facts.get(key)
    if not isinstance(value, str):
        raise FingerprintError(f"{where!r} has no string {key}")
    return value


__all__ = [
    "DistributionError",
    "Fingerprint",
    "FingerprintError",
    "Link",
    "TorchFacts",
    "abi_tag",
    "fingerprint_path",
]
