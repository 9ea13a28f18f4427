"""variants: the one grammar of variant tags, the variant of an index URL, the Triton projects."""

from __future__ import annotations

import pytest
from packaging.version import Version

from torchstack import variants
from torchstack.variants import Variant


class TestParse:
    @pytest.mark.parametrize(("tag", "expected"), [
        ("cpu", Variant("cpu")),
        ("xpu", Variant("xpu")),
        ("cu128", Variant("cu128", cuda="12.8")),
        ("cu130", Variant("cu130", cuda="13.0")),
        ("cu92", Variant("cu92", cuda="9.2")),  # torch 1.x: the last digit is the minor
        ("rocm6.4", Variant("rocm6.4", rocm="6.4")),
        ("rocm6.2.4", Variant("rocm6.2.4", rocm="6.2.4")),
    ], ids=["cpu", "xpu", "cu128", "cu130", "cu92", "rocm-major-minor", "rocm-patch"])
    def test_variants(self, tag: str, expected: Variant) -> None:
        assert variants.parse(tag) == expected

    @pytest.mark.parametrize("tag", [
        "",             # no local tag at all
        "git1234567",   # a source build's local tag
        "cu1",          # one digit cannot be major and minor
        "rocm6",        # ROCm is always major.minor
        "CPU",          # local tags are lower case once normalized
        "cu128.post1",  # anything after the tag
    ], ids=["empty", "git", "cu-one-digit", "rocm-major-only", "upper-case", "trailing"])
    def test_not_a_variant(self, tag: str) -> None:
        assert variants.parse(tag) is None

    @pytest.mark.parametrize(("tag", "hip"), [
        ("rocm6.2.4", "6.2"), ("rocm6.4", "6.4"), ("cu128", None), ("cpu", None),
    ])
    def test_hip_is_major_minor(self, tag: str, hip: str | None) -> None:
        parsed = variants.parse(tag)
        assert parsed is not None
        assert parsed.hip == hip


class TestOfferedBy:
    @pytest.mark.parametrize(("location", "variant"), [
        ("https://download.pytorch.org/whl/cu128/", "cu128"),
        ("https://download.pytorch.org/whl/rocm6.4", "rocm6.4"),  # no trailing slash
        ("/srv/mirror/whl/cpu", "cpu"),                             # a local folder
        ("https://pypi.org/simple/", None),                         # offers any variant
        ("https://download.pytorch.org/whl/", None),
    ], ids=["cu128", "rocm-no-slash", "folder", "pypi", "whl-root"])
    def test_last_segment(self, location: str, variant: str | None) -> None:
        assert variants.offered_by(location) == variant


class TestCudaTag:
    @pytest.mark.parametrize(("version", "tag"), [
        ("12.8.90", "cu128"),  # nvidia-cuda-runtime-cu12's own numbering
        ("13.0.96", "cu130"),
        ("13", "cu130"),       # a major alone: minor 0
    ])
    def test_tags(self, version: str, tag: str) -> None:
        assert variants.cuda_tag(Version(version)) == tag

    def test_round_trip(self) -> None:
        parsed = variants.parse(variants.cuda_tag(Version("12.6.77")))
        assert parsed is not None
        assert parsed.cuda == "12.6"


class TestTriton:
    @pytest.mark.parametrize(("project", "triton"), [
        ("triton", True),
        ("pytorch-triton-rocm", True),
        ("pytorch_triton_xpu", True),  # compared normalized
        ("Pytorch-Triton-ROCm", True),
        ("torch", False),
        ("triton-windows", False),
    ])
    def test_projects(self, project: str, triton: bool) -> None:
        assert variants.is_triton(project) is triton
