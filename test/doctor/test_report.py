"""torchstack.doctor.report: the verdict, the active torch, and the report as text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from support.doctorenv import (
    CUDNN_FIX,
    NINJA_PATH,
    SITE,
    Diagnosis,
    clean_environ,
    doctor,
    no_cuda,
    run_doctor,
)


class TestTorchWithoutNvidiaWheels:
    def test_exit_code_says_problems(self, cu13_bare_report: Diagnosis) -> None:
        assert cu13_bare_report[0] == 1
        assert cu13_bare_report[1]["healthy"] is False

    def test_active_torch_and_fingerprint(self, cu13_bare_report: Diagnosis,
                                          cu13_bare_venv: Path) -> None:
        torch = cu13_bare_report[1]["torch"]
        assert torch["version"] == "2.14.1+cu130"
        assert torch["abi_tag"] == "torch-2.14.1-cxx11-cu13"
        assert torch["folder"] == str(cu13_bare_venv / SITE)

    def test_human_output_groups_by_severity_fix_below(self, cu13_bare_venv: Path) -> None:
        run = run_doctor(["--python", str(cu13_bare_venv / "bin" / "python")], clean_environ())
        assert run.returncode == 1
        lines = run.stdout.splitlines()
        headings = [line.split(" (")[0] for line in lines if line.endswith("):")]
        assert headings == ["problems", "warnings", "info"]
        at = next(i for i, line in enumerate(lines) if "libcudnn.so.9 not found" in line)
        assert lines[at + 1].strip() == f"fix: {CUDNN_FIX}"
        assert lines[at].startswith("  ") and lines[at + 1].startswith("      fix:")


class TestCpuTorch:
    def test_healthy(self, cpu_venv: Path, tmp_path: Path) -> None:
        code, report = doctor(cpu_venv / "bin" / "python", clean_environ(PATH=NINJA_PATH),
                              "--default-cuda-home", no_cuda(tmp_path))
        assert code == 0, report["findings"]
        assert report["torch"]["abi_tag"] == "torch-2.13.0-cxx11-cpu"
        assert [f["severity"] for f in report["findings"]].count("problem") == 0


class TestCommandLine:
    def test_json_and_text_say_the_same(self, cu13_bare_venv: Path) -> None:
        python = str(cu13_bare_venv / "bin" / "python")
        data = json.loads(run_doctor(["--json", "--python", python], clean_environ()).stdout)
        text = run_doctor(["--python", python], clean_environ()).stdout
        for finding in data["findings"]:
            assert f"  {finding['message']}" in text
            assert finding["fix"] is None or f"fix: {finding['fix']}" in text
