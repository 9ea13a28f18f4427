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
