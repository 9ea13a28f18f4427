"""The abi_tag an official torch wheel provides, known from its version and variant alone:
which releases were built with the C++11 ABI, and the CUDA or ROCm runtime of the variant.
Source builds record theirs at install, from the built library. The rule: docs/design.rst,
"The abi tag of an official wheel"."""

from __future__ import annotations

from packaging.version import Version

from torchstack import variants
from torchstack.fingerprint.read import Fingerprint, TorchFacts, abi_tag


def cxx11_abi(release: Version, variant: str) -> bool:
    """Official wheels use the C++11 ABI since 2.7, and 2.6 did in its cu126 builds."""
    return release >= Version("2.7") or (release.release[:2] == (2, 6) and variant == "cu126")


def provided(version: str, variant: str) -> Fingerprint:
    """The fingerprint the official torch wheel `version` (2.9.1+cu128) of `variant` records."""
    release = Version(version)
    parsed = variants.parse(variant)
    facts = TorchFacts(release.public, release.local, cxx11_abi(release, variant),
                       parsed.cuda if parsed else None, parsed.rocm if parsed else None)
    cuda_major = int(facts.cuda.split(".")[0]) if facts.cuda else None
    return Fingerprint("provider", "torch", version, facts, None, None, cuda_major,
                       abi_tag("provider", None, facts))


def provided_tag(version: str, variant: str) -> str:
    """The abi_tag of the official torch wheel `version` (2.9.1+cu128) of `variant`."""
    return provided(version, variant).abi_tag
