"""torchstack.doctor.libraries: where each library torch needs resolves, and what is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cudastack import module_roots, module_versions
from support.doctorenv import (
    CUDNN_FIX,
    NINJA_PATH,
    SITE,
    Diagnosis,
    clean_environ,
    doctor,
    findings,
    library,
    one,
)


class TestTorchWithoutNvidiaWheels:
    def test_cudnn_missing_with_module_or_pinned_wheel(self, cu13_bare_report: Diagnosis) -> None:
        found = one(cu13_bare_report[1], "library-missing", "libcudnn.so.9 not found")
        assert found["severity"] == "problem"
        assert found["fix"] == CUDNN_FIX
        assert "torch/lib/libtorch_cuda.so" in found["message"]

    @pytest.mark.parametrize(("soname", "fix"), [
        # toolkit libraries: the CUDA module of torch's major, or cuda-toolkit's extra
        ("libcublas.so.13", 'load CUDA/13.x or pip install "cuda-toolkit[cublas]==13.0.3"'),
        # a 0.x series: the minor matters
        ("libcusparseLt.so.0",
         "load cuSPARSELt/0.8.x or pip install nvidia-cusparselt-cu13==0.8.1"),
        ("libnccl.so.2", "load NCCL/2.x or pip install nvidia-nccl-cu13==2.30.7"),
    ], ids=["toolkit", "cusparselt", "nccl"])
    def test_other_missing_libraries(self, cu13_bare_report: Diagnosis, soname: str,
                                     fix: str) -> None:
        assert one(cu13_bare_report[1], "library-missing", f"{soname} not found")["fix"] == fix

    def test_driver_library_is_info_not_problem(self, cu13_bare_report: Diagnosis) -> None:
        report = cu13_bare_report[1]
        found = one(report, "driver-library", "libcuda.so.1")
        assert found["severity"] == "info"
        assert not findings(report, "library-missing") or all(
            "libcuda.so.1" not in f["message"] for f in findings(report, "library-missing"))
        assert library(report, "libcuda.so.1")[0]["source"] == "driver"

    def test_system_library_row(self, cu13_bare_report: Diagnosis) -> None:
        # This machine's ld.so.conf lists /usr/local/cuda-13.0/lib, which has libcudart.
        rows = library(cu13_bare_report[1], "libcudart.so.13")
        assert [r["source"] for r in rows] == ["system"]
        assert rows[0]["path"] == os.path.join("/usr/local/cuda-13.0/lib", "libcudart.so.13")


class TestTorchWithNvidiaWheels:
    def test_every_library_resolves(self, cu13_full_venv: Path, tmp_path: Path) -> None:
        code, report = doctor(cu13_full_venv / "bin" / "python",
                              clean_environ(PATH=NINJA_PATH, CUDA_HOME="/usr/local/cuda"))
        assert findings(report, "library-missing") == []
        assert [r["source"] for r in library(report, "libcudnn.so.9")] == ["wheel"]
        assert library(report, "libcudnn.so.9")[0]["path"] == str(
            cu13_full_venv / SITE / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
        # libcudart: torch's RPATH finds the wheel's before the system's
        assert {r["source"] for r in library(report, "libcudart.so.13")} == {"wheel"}
        assert code == 0, [f for f in report["findings"] if f["severity"] == "problem"]

    def test_libraries_from_modules(self, cu13_bare_venv: Path, cuda_stack: dict[str, Path]
                                    ) -> None:
        """Stand-in CUDA, cuDNN, NCCL, ... modules made of the real libraries, as loaded."""
        roots = module_roots(cuda_stack)
        versions = module_versions(cuda_stack)
        environ = clean_environ(
            LD_LIBRARY_PATH=":".join(str(root / "lib") for root in roots.values()),
            LOADEDMODULES=":".join(f"{name}/{versions[name]}" for name in roots),
            **{f"EBROOT{name.upper()}": str(root) for name, root in roots.items()})
        _, report = doctor(cu13_bare_venv / "bin" / "python", environ)
        assert findings(report, "library-missing") == []
        row = library(report, "libcudnn.so.9")[0]
        assert row["source"] == "module"
        assert row["where"].startswith(f"module cuDNN/{versions['cuDNN']} ")
