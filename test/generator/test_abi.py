"""abi: the abi_tag an official torch wheel provides, from its version and variant."""

from __future__ import annotations

import pytest
from packaging.version import Version

from torchstack.generator import abi


class TestCxx11Abi:
    @pytest.mark.parametrize(("release", "variant", "cxx11"), [
        ("2.7.0", "cpu", True),      # every build since 2.7
        ("2.9.1", "cu128", True),
        ("2.6.0", "cu126", True),    # 2.6 only in its cu126 builds
        ("2.6.0", "cu124", False),
        ("2.6.0", "cpu", False),
        ("2.5.1", "cu124", False),
    ])
    def test_history(self, release: str, variant: str, cxx11: bool) -> None:
        assert abi.cxx11_abi(Version(release), variant) is cxx11


class TestProvidedTag:
    @pytest.mark.parametrize(("version", "variant", "tag"), [
        ("2.9.1+cu128", "cu128", "torch-2.9.1-cxx11-cu12"),
        ("2.9.1", "cu128", "torch-2.9.1-cxx11-cu12"),  # PyPI's untagged CUDA build
        ("2.9.1+cpu", "cpu", "torch-2.9.1-cxx11-cpu"),
        ("2.9.1+rocm6.4", "rocm6.4", "torch-2.9.1-cxx11-rocm6.4"),
        ("2.9.1+rocm6.2.4", "rocm6.2.4", "torch-2.9.1-cxx11-rocm6.2"),  # ROCm major.minor
        ("2.5.1+cu124", "cu124", "torch-2.5.1-precxx11-cu12"),
        ("2.9.1+xpu", "xpu", "torch-2.9.1-cxx11-cpu"),  # no CUDA or ROCm runtime
    ])
    def test_tags(self, version: str, variant: str, tag: str) -> None:
        assert abi.provided_tag(version, variant) == tag


class TestProvided:
    """The one provider fingerprint of a version and variant: plan's tag and siteprojects'
    provider both come from it."""

    def test_cuda_wheel(self) -> None:
        found = abi.provided("2.9.1+cu128", "cu128")
        assert (found.role, found.name, found.version) == ("provider", "torch", "2.9.1+cu128")
        assert (found.torch.release, found.torch.local, found.torch.cuda) == ("2.9.1", "cu128",
                                                                               "12.8")
        assert found.cuda_major == 12
        assert found.abi_tag == abi.provided_tag("2.9.1+cu128", "cu128")

    def test_rocm_wheel_has_no_cuda_major(self) -> None:
        found = abi.provided("2.9.1+rocm6.4", "rocm6.4")
        assert (found.torch.hip, found.cuda_major) == ("6.4", None)
