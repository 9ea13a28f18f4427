"""torchstack.fingerprint.compat at install time: assume_built_against and disagreements,
table-driven."""

from __future__ import annotations

import pytest
from support.fingerprints import (
    CPU,
    CPU_OLD_ABI,
    CU12,
    CU13,
    CUDA_LIBS,
    NEWER,
    ROCM,
    consumer,
    provider,
)

from torchstack.fingerprint.compat import CompatError, assume_built_against, check, disagreements
from torchstack.fingerprint.read import Fingerprint


class TestAssumeBuiltAgainst:
    @pytest.mark.parametrize(
        ("p", "c"),
        [
            # a C++ consumer that names its torch release is taken as it is
            (CU13, consumer("cxx", release="2.12.0")),
            # a stable-ABI consumer without a release: its rules do not need one
            (CPU, consumer("stable", release=None)),
            # a consumer that only imports torch
            (CPU, consumer("python", release=None)),
        ],
        ids=["cxx-with-release", "stable-without-release", "python-without-release"],
    )
    def test_unchanged(self, p: Fingerprint, c: Fingerprint) -> None:
        assert assume_built_against(p, c) is c

    @pytest.mark.parametrize(
        ("p", "c", "release", "local", "cuda", "hip", "tag"),
        [
            # a CPU provider lends release and local tag
            (CPU, consumer(release=None), "2.13.0", "cpu", None, None, "torch-2.13.0-cxx11-cpu"),
            # a CUDA provider lends its CUDA version too
            (CU13, consumer(release=None), "2.13.0", "cu130", "13.0", None,
             "torch-2.13.0-cxx11-cu13"),
            # a ROCm provider lends its HIP version
            (ROCM, consumer(release=None), "2.13.0", "rocm6.4", None, "6.4.43484",
             "torch-2.13.0-cxx11-rocm6.4"),
            # a newer provider: the assumption follows the provider
            (NEWER, consumer(release=None), "2.14.1", "cpu", None, None,
             "torch-2.14.1-cxx11-cpu"),
            # the consumer's own CUDA facts win over the provider's
            (CU13, consumer(release=None, cuda="12.8"), "2.13.0", "cu128", "12.8", None,
             "torch-2.13.0-cxx11-cu12"),
            # the consumer's own C++ ABI is kept (here the pre-C++11 one)
            (CPU, consumer(release=None, cxx11_abi=False), "2.13.0", "cpu", None, None,
             "torch-2.13.0-precxx11-cpu"),
        ],
        ids=["cpu", "cu13", "rocm", "newer", "own-cuda-kept", "own-abi-kept"],
    )
    def test_fills_the_unknown_release(
        self, p: Fingerprint, c: Fingerprint, release: str, local: str,
        cuda: str | None, hip: str | None, tag: str,
    ) -> None:
        assumed = assume_built_against(p, c)
        assert (assumed.torch.release, assumed.torch.local) == (release, local)
        assert (assumed.torch.cuda, assumed.torch.hip) == (cuda, hip)
        assert assumed.torch.cxx11_abi == c.torch.cxx11_abi
        assert assumed.abi_tag == tag
        # everything else is the consumer's own
        assert (assumed.role, assumed.name, assumed.version) == (c.role, c.name, c.version)
        assert (assumed.link, assumed.requires_torch) == (c.link, c.requires_torch)
        assert assumed.torch_libraries == c.torch_libraries

    @pytest.mark.parametrize(
        ("p", "c", "compatible"),
        [
            # taken as built on the provider, it is compatible with it
            (CPU, consumer(release=None), True),
            (CU13, consumer(release=None), True),
            # a requirement still applies
            (NEWER, consumer(release=None, requires="==2.13.0"), False),
            # a C++ ABI that differs is still refused
            (CPU_OLD_ABI, consumer(release=None), False),
            # CUDA code of another major is still refused
            (CU12, consumer(release=None, cuda="13.0", libraries=CUDA_LIBS), False),
        ],
        ids=["cpu", "cu13", "requirement", "abi", "cuda-major"],
    )
    def test_then_checked(self, p: Fingerprint, c: Fingerprint, compatible: bool) -> None:
        # unassumed, a cxx consumer without release is refused for that alone
        assert not check(p, c).compatible
        assert check(p, assume_built_against(p, c)).compatible is compatible


class TestDisagreements:
    @pytest.mark.parametrize(
        ("p", "version", "cuda"),
        [
            # the easyconfig names the public version, the wheel adds its local tag
            (CPU, "2.13.0", None),
            # the same local tag
            (CPU, "2.13.0+cpu", None),
            # PEP 440: 2.13 is 2.13.0
            (CPU, "2.13", None),
            # the same CUDA major; the minor is the CUDA module's business
            (CU13, "2.13.0", "13.0"),
            (CU13, "2.13.0+cu130", "13.0.2"),
            # no CUDA declared: the flavour is not checked
            (CU13, "2.13.0", None),
            (ROCM, "2.13.0", None),
        ],
        ids=["public", "local", "short-release", "cuda-13.0", "cuda-13.0.2", "no-cuda", "rocm"],
    )
    def test_agrees(self, p: Fingerprint, version: str, cuda: str | None) -> None:
        assert disagreements(p, version, cuda) == []

    @pytest.mark.parametrize(
        ("p", "version", "cuda", "expected"),
        [
            # another release
            (CPU, "2.14.1", None,
             ["the easyconfig installs torch 2.14.1, the installation holds 2.13.0+cpu"]),
            # the same release with another local tag
            (CPU, "2.13.0+cu130", None,
             ["the easyconfig installs torch 2.13.0+cu130, the installation holds 2.13.0+cpu"]),
            # a pre-release is not the release
            (provider("2.14.0a0+git1234567"), "2.14.0", None,
             ["the easyconfig installs torch 2.14.0, the installation holds 2.14.0a0+git1234567"]),
            # CUDA declared, the torch is CPU-only
            (CPU, "2.13.0", "13.0",
             ["the easyconfig declares CUDA 13.0, the installed torch is cpu"]),
            # CUDA of another major
            (CU12, "2.13.0", "13.0",
             ["the easyconfig declares CUDA 13.0, the installed torch is cu12"]),
            # both at once: every reason is reported
            (CPU, "2.14.1", "13.0",
             ["the easyconfig installs torch 2.14.1, the installation holds 2.13.0+cpu",
              "the easyconfig declares CUDA 13.0, the installed torch is cpu"]),
        ],
        ids=["release", "local-tag", "pre-release", "cpu-not-cuda", "cuda-major", "both"],
    )
    def test_disagrees(
        self, p: Fingerprint, version: str, cuda: str | None, expected: list[str]
    ) -> None:
        assert disagreements(p, version, cuda) == expected

    @pytest.mark.parametrize(
        ("version", "bad"),
        [
            # not a version at all
            ("latest", "latest"),
            # empty
            ("", ""),
        ],
        ids=["word", "empty"],
    )
    def test_invalid_declared_version_raises(self, version: str, bad: str) -> None:
        with pytest.raises(CompatError, match=rf"^invalid torch release {bad!r}$"):
            disagreements(CPU, version, None)
