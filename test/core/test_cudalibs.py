"""CUDA wheel pins of torch against stand-in modules with real shared objects."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from torchstack.cudalibs import (
    CudaLibsError,
    Provided,
    check_pin,
    cuda_pins,
    library_version,
    match_modules,
    plan_with_modules,
    series_problem,
    wheel_projects,
    write_stand_in,
    write_stand_ins,
)
from torchstack.distributions import tree_distributions
from torchstack.generator import cudamodules

TORCH_2_14_1 = (
    "filelock",
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,'
    'nvtx]==13.0.3; platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
    'triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"',
    'optree>=0.13.0; extra == "optree"',
)
TORCH_2_6_CU12 = (
    'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cublas-cu12==12.4.5.8; platform_system == "Linux" and platform_machine == "x86_64"',
)
CUDA_LIBS = ("libcudart.so.13", "libcublas.so.13", "libcufft.so.12", "libcufile.so.0",
             "libcupti.so.13", "libcurand.so.10", "libcusolver.so.12", "libcusparse.so.12",
             "libnvJitLink.so.13", "libnvrtc.so.13")


def make_library(folder: Path, soname: str, realname: str | None = None) -> Path:
    """A real shared object with `soname`, stored as `realname` with a soname symlink."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "stub.c"
    source.write_text("int torchstack_stub;\n")
    target = folder / (realname or soname)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(target),
                    str(source)], check=True)
    source.unlink()
    if realname:
        (folder / soname).symlink_to(realname)
    return target


def module_root(root: Path, libraries: dict[str, str | None]) -> Path:
    for soname, realname in libraries.items():
        make_library(root / "lib", soname, realname)
    return root


@pytest.fixture
def modules(tmp_path: Path) -> dict[str, Provided]:
    cuda = module_root(tmp_path / "CUDA", dict.fromkeys(CUDA_LIBS))
    cudnn = module_root(tmp_path / "cuDNN", {"libcudnn.so.9": "libcudnn.so.9.24.0"})
    nccl = module_root(tmp_path / "NCCL", {"libnccl.so.2": "libnccl.so.2.30.7"})
    return {
        "CUDA": Provided("CUDA", "13.0.2", cuda),
        "cuDNN": Provided("cuDNN", "9.24.0.43-CUDA-13.0.2", cudnn),
        "NCCL": Provided("NCCL", "2.30.7-CUDA-13.0.2", nccl),
    }


class TestCudaPins:
    def test_cuda13_style(self) -> None:
        pins = cuda_pins(TORCH_2_14_1, "3.11", "x86_64")
        assert [(p.project, p.version, p.module) for p in pins] == [
            ("cuda-toolkit", "13.0.3", "CUDA"),
            ("nvidia-cudnn-cu13", "9.24.0.43", "cuDNN"),
            ("nvidia-nccl-cu13", "2.30.7", "NCCL"),
        ]
        assert len(pins[0].libraries) == 11  # every extra, nvtx included

    @pytest.mark.parametrize(
        ("arch", "count"),
        [("x86_64", 2), ("aarch64", 0)],  # the cu12 pins carry a platform_machine marker
        ids=["x86_64", "aarch64"],
    )
    def test_cuda12_style_markers(self, arch: str, count: int) -> None:
        assert len(cuda_pins(TORCH_2_6_CU12, "3.11", arch)) == count

    @pytest.mark.parametrize(("line", "version"), [
        ("nvidia-cublas<=13.1.1.3,>=13.1.0.3", "13.1.0.3"),  # torch 2.12.1's form
        ("nvidia-cudnn-cu13>=9", "9"),
        ("nvidia-nccl-cu13~=2.30.4", "2.30.4"),
    ], ids=["bounded", "lower", "compatible"])
    def test_range_checked_from_its_lower_bound(self, line: str, version: str) -> None:
        assert [p.version for p in cuda_pins([line], "3.11", "x86_64")] == [version]

    def test_range_without_lower_bound_is_refused(self) -> None:
        with pytest.raises(CudaLibsError, match="neither an exact pin nor a range"):
            cuda_pins(["nvidia-cudnn-cu13<10"], "3.11", "x86_64")


SERIES_CASES = [
    ("9.24.0", "9.24.0.43", None),  # the pinned release itself
    ("9.30.1", "9.24.0.43", None),  # a newer minor of the same major
    ("9.1.0", "9.24.0.43", "older"),  # same major, older minor
    ("10.0.0", "9.24.0.43", "another series"),  # a newer major
    ("8.9.7", "9.24.0.43", "another series"),  # an older major
    ("0.7.1", "0.7.1", None),  # 0.x: the same minor
    ("0.8.0", "0.7.1", "another series"),  # 0.x: another minor is another series
]
SERIES_IDS = ["pinned", "newer-minor", "older-minor", "newer-major", "older-major", "zero-same",
              "zero-other"]


class TestSeriesProblem:
    """The one CUDA series rule the easyblock (cudalibs) and the generator (cudamodules) share."""

    @pytest.mark.parametrize(("have", "wanted", "problem"), SERIES_CASES, ids=SERIES_IDS)
    def test_rule(self, have: str, wanted: str, problem: str | None) -> None:
        assert series_problem(Version(have), Version(wanted)) == problem

    @pytest.mark.parametrize(("have", "wanted", "problem"), SERIES_CASES, ids=SERIES_IDS)
    def test_generator_and_easyblock_agree(self, tmp_path: Path, have: str, wanted: str,
                                           problem: str | None) -> None:
        project = "nvidia-cusparselt-cu13" if wanted.startswith("0.") else "nvidia-cudnn-cu13"
        pin, = cuda_pins([f"{project}=={wanted}"], "3.11", "x86_64")
        stem = pin.libraries[0].stem
        root = module_root(tmp_path / "lib", {f"{stem}.so.{have.split('.')[0]}":
                                              f"{stem}.so.{have}"})
        easyblock = check_pin(pin, Provided(pin.module, have, root))
        generator = cudamodules._series(pin, have)
        assert (easyblock is None) is (generator is None) is (problem is None)


class TestCheckPin:
    def test_matching_modules_pass(self, modules: dict[str, Provided]) -> None:
        pairs = match_modules(cuda_pins(TORCH_2_14_1, "3.11", "x86_64"), modules)
        assert [check_pin(pin, module) for pin, module in pairs] == [None, None, None]

    @pytest.mark.parametrize(
        ("realname", "module_version", "message"),
        [
            # An older cuDNN minor than the pin: the library's own version is named.
            ("libcudnn.so.9.1.0", "9.1.0", "provides libcudnn 9.1.0, older than the pin"),
            # No version in the file name: the module version decides.
            (None, "9.2.1", "provides libcudnn 9.2.1, older than the pin"),
            # A newer minor is fine within the major.
            ("libcudnn.so.9.30.1", "9.30.1", None),
        ],
        ids=["older-minor", "module-version", "newer-minor"],
    )
    def test_cudnn_versions(self, tmp_path: Path, realname: str | None, module_version: str,
                            message: str | None) -> None:
        root = module_root(tmp_path / "cuDNN", {"libcudnn.so.9": realname})
        pin = cuda_pins(['nvidia-cudnn-cu13==9.24.0.43'], "3.11", "x86_64")[0]
        problem = check_pin(pin, Provided("cuDNN", module_version, root))
        if message is None:
            assert problem is None
        else:
            assert problem is not None
            assert "nvidia-cudnn-cu13==9.24.0.43" in problem
            assert "module cuDNN/" + module_version in problem
            assert message in problem

    def test_other_major(self, tmp_path: Path) -> None:
        root = module_root(tmp_path / "cuDNN", {"libcudnn.so.8": "libcudnn.so.8.9.7"})
        pin = cuda_pins(['nvidia-cudnn-cu13==9.24.0.43'], "3.11", "x86_64")[0]
        problem = check_pin(pin, Provided("cuDNN", "8.9.7", root))
        assert problem == ("torch pins nvidia-cudnn-cu13==9.24.0.43; module cuDNN/8.9.7 "
                           "provides libcudnn 8.9.7, another major")

    def test_cuda_toolkit_older_minor(self, modules: dict[str, Provided]) -> None:
        pin = cuda_pins(TORCH_2_14_1, "3.11", "x86_64")[0]
        old = Provided("CUDA", "12.9.1", modules["CUDA"].root)
        assert "provides CUDA 12.9.1, another major" in (check_pin(pin, old) or "")

    def test_missing_library_file(self, tmp_path: Path) -> None:
        root = module_root(tmp_path / "NCCL", {"libother.so.1": None})
        pin = cuda_pins(['nvidia-nccl-cu13==2.30.7'], "3.11", "x86_64")[0]
        assert "has no libnccl.so.*" in (check_pin(pin, Provided("NCCL", "2.30.7", root)) or "")

    def test_zero_major_needs_same_minor(self, tmp_path: Path) -> None:
        libraries = {"libcusparseLt.so.0": "libcusparseLt.so.0.7.1"}
        root = module_root(tmp_path / "cuSPARSELt", libraries)
        pin = cuda_pins(['nvidia-cusparselt-cu13==0.8.1'], "3.11", "x86_64")[0]
        problem = check_pin(pin, Provided("cuSPARSELt", "0.7.1", root))
        assert "another major" in (problem or "")


class TestPlan:
    def test_every_problem_at_once(self, tmp_path: Path, modules: dict[str, Provided]) -> None:
        old_nccl = module_root(tmp_path / "NCCL-old", {"libnccl.so.2": "libnccl.so.2.18.1"})
        old = dict(modules, cuDNN=Provided("cuDNN", "9.1.0", tmp_path / "none"),
                   NCCL=Provided("NCCL", "2.18.1", old_nccl))
        with pytest.raises(CudaLibsError, match=r"has no libcudnn.*; .*libnccl 2.18.1, older"):
            plan_with_modules(TORCH_2_14_1, "3.11", "x86_64", old)


class TestMatchModules:
    def test_every_missing_module_named(self, modules: dict[str, Provided]) -> None:
        pins = cuda_pins(TORCH_2_14_1, "3.11", "x86_64")
        with pytest.raises(CudaLibsError, match=r"no dependency provides NCCL, cuDNN"):
            match_modules(pins, {"CUDA": modules["CUDA"]})


class TestStandIn:
    def test_dist_info_is_read_as_a_distribution(
        self, tmp_path: Path, modules: dict[str, Provided]
    ) -> None:
        pin = cuda_pins(TORCH_2_14_1, "3.11", "x86_64")[1]
        write_stand_in(tmp_path, pin, modules["cuDNN"])
        (dist,) = tree_distributions(tmp_path)
        assert (dist.name, dist.version) == ("nvidia-cudnn-cu13", "9.24.0.43")
        provided_by = (tmp_path / "nvidia_cudnn_cu13-9.24.0.43.dist-info" / "PROVIDED_BY")
        assert provided_by.read_text().startswith("cuDNN/9.24.0.43-CUDA-13.0.2 ")

    def test_plan_then_write_every_pin(self, tmp_path: Path, modules: dict[str, Provided]) -> None:
        site = tmp_path / "site-packages"
        dist_info = site / "torch-2.14.1.dist-info"
        dist_info.mkdir(parents=True)
        (dist_info / "METADATA").write_text("Name: torch\nVersion: 2.14.1\n")
        plan = plan_with_modules(TORCH_2_14_1, "3.11", "x86_64", modules)
        lines = write_stand_ins(site, plan)
        assert lines[1] == "nvidia-cudnn-cu13==9.24.0.43 <- cuDNN/9.24.0.43-CUDA-13.0.2"
        names = sorted(d.name for d in tree_distributions(site))
        assert names == ["cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "torch"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [(["torch", "nvidia-cudnn-cu13", "cuda-toolkit", "triton"], ["nvidia-cudnn-cu13",
                                                                "cuda-toolkit"])],
    ids=["mixed"],
)
def test_wheel_projects(names: list[str], expected: list[str]) -> None:
    assert wheel_projects(names) == expected


def test_library_version_from_real_name(tmp_path: Path) -> None:
    make_library(tmp_path, "libnccl.so.2", "libnccl.so.2.30.7")
    assert library_version([tmp_path / "libnccl.so.2"]) == "2.30.7"
