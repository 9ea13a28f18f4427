"""torchstack.doctor.importcheck: `doctor --import` on the real eb-built PyTorch module."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from support.doctorenv import (
    REPO,
    SITE,
    one,
)
from support.ebenv import EasyBuildEnv


class TestRealModule:
    def _doctor(self, eb_env: EasyBuildEnv, module: str, python: str, *extra: str
                ) -> tuple[int, dict[str, Any]]:
        script = (f"module load {module}\ncd {REPO}\nset +e\n"
                  f"{sys.executable} -m torchstack doctor --json --python {python} "
                  f"{' '.join(extra)}\necho \"rc=$?\"")
        run = eb_env.shell(script)
        assert run.returncode == 0, run.stderr
        body, _, code = run.stdout.rpartition("rc=")
        return int(code), json.loads(body)

    def test_module_torch_is_healthy(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str
                                     ) -> None:
        code, report = self._doctor(eb_env, pytorch_cpu_module, "python3", "--import")
        site = eb_env.installpath / "software" / "PyTorch" / "2.13.0-whl" / SITE
        assert report["torch"]["folder"] == str(site)
        assert code == 0, [f for f in report["findings"] if f["severity"] == "problem"]
        assert one(report, "import-torch")["message"].startswith(
            f"import torch: 2.13.0+cpu from {site}/torch/__init__.py")

    def test_bare_venv_misses_the_python_modules_packages(
            self, eb_env: EasyBuildEnv, pytorch_cpu_module: str, tmp_path: Path) -> None:
        venv = tmp_path / "venv"
        made = eb_env.shell(f"module load {pytorch_cpu_module}\n"
                            f"python3 -m venv --without-pip {venv}")
        assert made.returncode == 0, made.stderr
        code, report = self._doctor(eb_env, pytorch_cpu_module, str(venv / "bin" / "python"),
                                    "--import")
        assert code == 1
        assert report["torch"]["version"] == "2.13.0+cpu"  # through the module's PYTHONPATH
        found = one(report, "requirement-missing", "sympy")
        assert found["message"] == ("torch 2.13.0+cpu requires sympy>=1.13.3, which is not on "
                                    "sys.path")
        assert one(report, "import-torch")["message"].startswith("import torch fails: ")
