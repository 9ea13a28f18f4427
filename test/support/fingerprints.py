"""Fingerprints built directly for the rules of torchstack.fingerprint.compat: torch providers
and consumers."""

from __future__ import annotations

from torchstack.fingerprint.read import Fingerprint, Link, TorchFacts, abi_tag


def provider(
    version: str = "2.13.0+cpu",
    *,
    cxx11_abi: bool | None = True,
    cuda: str | None = None,
    hip: str | None = None,
) -> Fingerprint:
    """A torch provider; release and local tag come from `version`."""
    release, _, local = version.partition("+")
    torch = TorchFacts(release, local or None, cxx11_abi, cuda, hip)
    major = int(cuda.split(".")[0]) if cuda else None
    return Fingerprint("provider", "torch", version, torch, None, None, major,
                       abi_tag("provider", None, torch))


def consumer(
    link: Link = "cxx",
    *,
    requires: str | None = "==2.13.0",
    release: str | None = "2.13.0",
    cxx11_abi: bool | None = True,
    cuda: str | None = None,
    hip: str | None = None,
    cuda_major: int | None = None,
    libraries: tuple[str, ...] = ("libc10.so", "libtorch_cpu.so"),
    name: str = "fakevision",
) -> Fingerprint:
    """A consumer of `link` class, built against torch `release`."""
    local = f"cu{cuda.replace('.', '')}" if cuda else None
    torch = TorchFacts(release, local, cxx11_abi, cuda, hip)
    return Fingerprint("consumer", name, "0.1.0", torch, link, requires, cuda_major,
                       abi_tag("consumer", link, torch, cuda_major), libraries)


# a consumer's libtorch libraries when it links CUDA or HIP code
CUDA_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so")
HIP_LIBS = ("libc10.so", "libc10_hip.so", "libtorch_cpu.so", "libtorch_hip.so")
CPU = provider()
CPU_OLD_ABI = provider(cxx11_abi=False)
CU13 = provider("2.13.0+cu130", cuda="13.0")
CU12 = provider("2.13.0+cu128", cuda="12.8")
ROCM = provider("2.13.0+rocm6.4", hip="6.4.43484")
NEWER = provider("2.14.1+cpu")
OLDER = provider("2.12.0+cpu")
