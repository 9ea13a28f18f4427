"""release: variants from CUDA pins, markers per target, wheel names validated."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from torchstack.generator.release import ReleaseError, Target, variant_from_pins, wheel_name_version

X86 = Target((3, 13), "x86_64")
ARM = Target((3, 13), "aarch64")
CU12_X86_ONLY = ['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and '
                 'platform_machine == "x86_64"', "filelock"]
CU13 = ['cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"']


class TestVariantFromPins:
    @pytest.mark.parametrize(("requires", "target", "variant"), [
        (CU12_X86_ONLY, X86, "cu128"),   # PyPI's torch 2.9.1 on x86_64
        (CU12_X86_ONLY, ARM, "cpu"),     # the same metadata on aarch64: no CUDA pin applies
        (CU13, X86, "cu130"),            # CUDA 13 style: the cuda-toolkit meta-package
        (["filelock", "sympy>=1.13.3"], X86, "cpu"),
        (["nvidia-cuda-runtime==13.0.96"], ARM, "cu130"),
    ], ids=["cu12", "cu12-marker-arm", "cu13-toolkit", "none", "cu13-runtime"])
    def test_variants(self, requires: list[str], target: Target, variant: str) -> None:
        assert variant_from_pins(requires, target) == variant


class TestTarget:
    def test_markers_evaluated_for_the_target(self) -> None:
        # the environments themselves are tested in test/core/test_markers.py
        requirement = Requirement('nvidia-nccl-cu12==2.27.5; platform_machine == "x86_64"')
        assert X86.applies(requirement)
        assert not ARM.applies(requirement)

    @pytest.mark.parametrize(("filename", "fits"), [
        ("torch-2.9.1-cp313-cp313-manylinux_2_28_x86_64.whl", True),
        ("torch-2.9.1-cp313-cp313t-manylinux_2_28_x86_64.whl", False),  # free-threaded
        ("torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl", False),
        ("x-1-cp39-abi3-manylinux_2_28_x86_64.whl", True),
        ("x-1-py3-none-manylinux_2_34_x86_64.whl", False),  # newer than the glibc 2.28 default
        ("x-1-py3-none-any.whl", True),
    ])
    def test_wheel_tags(self, filename: str, fits: bool) -> None:
        assert (X86.misfit(filename) is None) is fits


class TestWheelNames:
    def test_local_version_spelled_percent_2b(self) -> None:
        name, version = wheel_name_version("torch-2.9.1%2Bcu128-cp313-cp313-linux_x86_64.whl")
        assert (name, str(version)) == ("torch", "2.9.1+cu128")

    @pytest.mark.parametrize("filename", ["torch-2.9.1'-cp313-cp313-linux_x86_64.whl",
                                          "torch.whl", 'torch"-1-py3-none-any.whl'])
    def test_invalid(self, filename: str) -> None:
        with pytest.raises(ReleaseError, match="invalid wheel filename"):
            wheel_name_version(filename)
