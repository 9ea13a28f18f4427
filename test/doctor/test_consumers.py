"""torchstack.doctor.consumers: whether each consumer fits the active torch, and its fix."""

from __future__ import annotations

from pathlib import Path

from support.doctorenv import (
    clean_environ,
    doctor,
    one,
)


class TestCpuTorch:
    def test_torchvision_built_for_cuda(self, cpu_vision_venv: Path) -> None:
        code, report = doctor(cpu_vision_venv / "bin" / "python", clean_environ())
        assert code == 1
        found = one(report, "consumer-incompatible", "torchvision 0.28.0")
        assert ("cannot run on torch 2.13.0+cpu: torchvision 0.28.0 links libtorch_cuda.so "
                "(cu13), torch 2.13.0+cpu is CPU-only; ") in found["message"]
        # The cause first, then the proof: the CUDA symbols libtorch_cpu cannot give it.
        assert " libtorch symbols missing in torch 2.13.0+cpu, e.g. " in found["message"]
        assert found["fix"] == ("pip install torchvision==0.28.0 --index-url "
                                "https://download.pytorch.org/whl/cpu (its cpu build), "
                                "or use torch 2.13.0 (cu13)")
        missing = one(report, "library-missing", "libtorch_cuda.so not found")
        assert "torchvision/_C.so" in missing["message"]
        assert "CPU-only: install builds of torchvision for torch 2.13.0+cpu" in missing["fix"]
        assert report["consumers"][0]["compatible"] is False
