"""torchstack.doctor.interpreter: the Python doctor diagnoses, and the Pythons it refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.doctorenv import (
    REPO,
    SITE,
    Factory,
    clean_environ,
    make_venv,
    run_doctor,
)

from torchstack.cli import main
from torchstack.doctor import DoctorError, query


class TestInterpreter:
    def test_query_a_venv(self, cpu_venv: Path) -> None:
        found = query(str(cpu_venv / "bin" / "python"), clean_environ())
        assert found.version == sys.version_info[:2]
        assert found.prefix == str(cpu_venv)
        assert (found.in_venv, found.system_site_packages) == (True, False)
        assert str(cpu_venv / SITE) in found.path
        assert "" not in found.path

    def test_query_by_name_on_path(self, cpu_venv: Path) -> None:
        found = query("python", clean_environ(PATH=str(cpu_venv / "bin")))
        assert found.prefix == str(cpu_venv)

    def test_not_on_path(self) -> None:
        with pytest.raises(DoctorError, match=r"^'no-such-python' is not on PATH$"):
            query("no-such-python", {"PATH": "/nowhere"})


class TestCommandLine:
    def test_bad_python_is_usage_error(self, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
        missing = tmp_path / "python"
        assert main(["doctor", "--python", str(missing)]) == 2
        assert capsys.readouterr().err == (f"torchstack: error: {str(missing)!r} is not an "
                                           "executable file\n")

    def test_not_a_python(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["doctor", "--python", "/bin/false"]) == 2
        assert capsys.readouterr().err.startswith(
            "torchstack: error: '/bin/false' is not a working Python interpreter")

    def test_default_is_the_running_interpreter(self, real_tree: Factory, real_wheel: Factory,
                                                runtime_wheels: list[Path]) -> None:
        venv = make_venv("sys-over-module", [real_wheel("torch-2.14.1"), *runtime_wheels],
                         system_site_packages=True)
        run = run_doctor(["--json"], clean_environ(), python=str(venv / "bin" / "python"))
        assert run.returncode in (0, 1), run.stderr
        report = json.loads(run.stdout)
        assert report["python"]["prefix"] == str(venv)
        assert report["torch"]["folder"] == str(venv / SITE)
        assert str(REPO) not in report["python"]["path"]  # doctor's own folder is not the user's
