"""`torchstack venv` on the real PyTorch/2.13.0-whl module (real eb, real Lmod, a real venv).

The stand (support/venvstand.py): a local index on 127.0.0.1 and a HOME without pip
configuration, so that the venv's pip.conf is what is under test.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from support.doctorenv import REPO, SITE, findings, one
from support.ebenv import EasyBuildEnv
from support.venvstand import PYTHON, PYTORCH, Stand

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(stand: Stand, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv made by torchstack on PyTorch/2.13.0-whl, with torchtoy and purepkg installed."""
    path = tmp_path_factory.mktemp("user") / "venv"
    stand.make(path)
    code, _, err = stand.pip(path, "torchtoy", "purepkg")
    assert code == 0, err
    return path


def _python(stand: Stand, venv: Path, code: str) -> tuple[int, str, str]:
    return stand.shell(f"{venv}/bin/python -c {shlex.quote(code)}")


def _doctor(stand: Stand, venv: Path, load: str = PYTORCH) -> tuple[int, dict[str, Any]]:
    code, out, err = stand.torchstack("doctor", "--json", "--python", f"{venv}/bin/python",
                                      load=load)
    assert code in (0, 1), err
    return code, json.loads(out)


class TestMade:
    def test_on_the_module_python_with_system_site_packages(self, venv: Path,
                                                            eb_env: EasyBuildEnv) -> None:
        config = (venv / "pyvenv.cfg").read_text()
        assert "include-system-site-packages = true" in config
        record = json.loads((venv / "torchstack-venv.json").read_text())
        assert record["modules"] == [PYTHON, PYTORCH]
        assert record["python"] == str(eb_env.python_root / "bin" / "python3")
        assert record["torch"] == "2.13.0+cpu"

    def test_constraints_pin_the_modules_distributions(self, venv: Path) -> None:
        lines = [line.split("#")[0].strip() for line in
                 (venv / "torchstack-constraints.txt").read_text().splitlines()]
        pins = [line for line in lines if line]
        assert "torch==2.13.0+cpu" in pins
        assert any(p.startswith("sympy==") for p in pins)  # from the Python module
        assert not [p for p in pins if p.startswith(("pip==", "setuptools==", "wheel=="))]

    def test_pip_conf_names_the_constraints(self, venv: Path) -> None:
        assert (venv / "pip.conf").read_text().endswith(
            f"[install]\nconstraint = {venv / 'torchstack-constraints.txt'}\n")

    def test_the_venvs_own_torchrun(self, venv: Path) -> None:
        script = (venv / "bin" / "torchrun").read_text()
        assert script.startswith(f"#!{venv / 'bin' / 'python'}\n")
        assert "from torch.distributed.run import main\n" in script


class TestPip:
    def test_package_requiring_torch_keeps_the_modules_torch(self, stand: Stand, venv: Path,
                                                            eb_env: EasyBuildEnv) -> None:
        code, out, err = _python(stand, venv, "import torch, torchtoy; "
                                 "print(torch.__version__, torch.__file__, torchtoy.__file__)")
        assert code == 0, err
        module_site = eb_env.installpath / "software" / "PyTorch" / "2.13.0-whl" / SITE
        assert out.split() == ["2.13.0+cpu", str(module_site / "torch" / "__init__.py"),
                               str(venv / SITE / "torchtoy" / "__init__.py")]
        assert not (venv / SITE / "torch").exists()

    def test_package_pinning_another_torch_fails_naming_the_conflict(self, stand: Stand,
                                                                     venv: Path) -> None:
        code, out, err = stand.pip(venv, "torchpin")
        assert code == 1
        assert "Cannot install torchpin==1.0" in err
        assert ("The conflict is caused by:\n    torchpin 1.0 depends on torch==2.14.1\n"
                "    The user requested (constraint) torch==2.13.0+cpu") in out
        assert not (venv / SITE / "torch").exists()

    def test_without_the_constraints_pip_would_take_a_second_torch(self, stand: Stand,
                                                                   venv: Path) -> None:
        """The control: the index does offer torch 2.14.1, it is the pins that refuse it."""
        code, out, err = stand.pip(venv, "--dry-run", "torchpin",
                                   environ="PIP_CONSTRAINT=/dev/null ")
        assert code == 0, err
        assert "Would install torch-2.14.1 torchpin-1.0" in out

    def test_pure_python_package_imports_with_the_modules_torch(self, stand: Stand,
                                                                venv: Path) -> None:
        code, out, err = _python(stand, venv, "import purepkg, torch; "
                                 "print(purepkg.NAME, torch.__version__)")
        assert code == 0, err
        assert out.split() == ["purepkg", "2.13.0+cpu"]


class TestUv:
    """uv does not see the modules' packages (it reads no system site-packages)."""

    @pytest.mark.parametrize("option", [
        pytest.param(("--constraints", "torchstack-constraints.txt"), id="constraints-file"),
        pytest.param(("--config-file", "uv.toml"), id="uv-toml"),
    ])
    def test_constraints_refuse_another_torch(self, stand: Stand, venv: Path,
                                              option: tuple[str, str]) -> None:
        code, _, err = stand.uv(venv, option[0], str(venv / option[1]), "torchpin")
        assert code == 1
        assert ("Because all versions of torchpin depend on torch==2.14.1 and "
                "torch==2.13.0+cpu") in err
        assert not (venv / SITE / "torch").exists()

    def test_excludes_install_no_copy_of_the_modules_packages(self, stand: Stand,
                                                              venv: Path) -> None:
        code, _, err = stand.uv(venv, "--excludes", str(venv / "torchstack-excludes.txt"),
                                "torchneed")
        assert code == 0, err
        assert (venv / SITE / "torchneed").is_dir()
        assert not (venv / SITE / "torch").exists()
        code, out, err = _python(stand, venv, "import torchneed, torch; print(torch.__version__)")
        assert (code, out.strip()) == (0, "2.13.0+cpu"), err


class TestTorchrun:
    def test_torchrun_of_the_venv_sees_its_packages(self, stand: Stand, venv: Path,
                                                    tmp_path: Path) -> None:
        worker = tmp_path / "worker.py"
        worker.write_text("import purepkg, torch, torchtoy\n"
                          "print('worker', purepkg.NAME, torch.__version__, "
                          "torchtoy.double(2).item())\n")
        code, out, err = stand.shell(
            f"source {venv}/bin/activate\ncommand -v torchrun\n"
            f"torchrun --standalone --nproc_per_node=1 {worker}")
        assert code == 0, err
        assert out.splitlines()[0] == str(venv / "bin" / "torchrun")
        assert "worker purepkg 2.13.0+cpu 4" in out

    def test_without_activation_only_the_venvs_torchrun_sees_them(
            self, stand: Stand, venv: Path, tmp_path: Path) -> None:
        """A batch script that calls the venv's torchrun by its path, activating nothing: the
        module's own torchrun (`#!/usr/bin/env python`, the module's Python) would not do."""
        worker = tmp_path / "worker.py"
        worker.write_text("import purepkg\nprint('worker', purepkg.NAME)\n")
        run = f"--standalone --nproc_per_node=1 {worker}"
        code, out, err = stand.shell(f"{venv}/bin/torchrun {run}")
        assert code == 0, err
        assert "worker purepkg" in out
        code, out, err = stand.shell(f"command -v torchrun\ntorchrun {run}")
        assert out.splitlines()[0].endswith("/software/PyTorch/2.13.0-whl/bin/torchrun")
        assert code == 1
        assert "ModuleNotFoundError: No module named 'purepkg'" in out + err


class TestActivation:
    @pytest.mark.parametrize("load", [
        pytest.param("", id="no-module-loaded"),
        pytest.param(PYTHON, id="python-without-pytorch"),
    ])
    def test_warns_naming_the_modules_to_load(self, stand: Stand, venv: Path, load: str
                                              ) -> None:
        missing = PYTORCH if load else f"{PYTHON} {PYTORCH}"
        code, _, err = stand.shell(f"source {venv}/bin/activate", load=load)
        assert code == 0
        assert (f"torchstack: warning: the venv {venv} was made on modules that are not "
                f"loaded: {missing}; run: module load {missing}\n") in err

    def test_warns_with_another_pytorch_loaded(self, stand: Stand, venv: Path,
                                               tmp_path: Path) -> None:
        other = tmp_path / "modules" / "PyTorch"
        other.mkdir(parents=True)
        (other / "9.9.lua").write_text(f'setenv("EBROOTPYTORCH", "{tmp_path}")\n')
        code, _, err = stand.shell(f"module use {tmp_path / 'modules'}\nmodule load PyTorch/9.9\n"
                                   f"source {venv}/bin/activate", load="")
        assert code == 0
        assert f"not loaded: {PYTHON} {PYTORCH}; run: module load {PYTHON} {PYTORCH}" in err

    def test_quiet_with_its_modules_loaded(self, stand: Stand, venv: Path) -> None:
        code, _, err = stand.shell(f"source {venv}/bin/activate")
        assert code == 0
        assert "torchstack" not in err

    @pytest.mark.parametrize(("shell", "script"), [
        # Python's activate.csh reads $prompt, which only an interactive tcsh has
        pytest.param("tcsh", "set prompt = \"> \"; source activate.csh", id="csh"),
        pytest.param("fish", "source activate.fish", id="fish"),
    ])
    @pytest.mark.parametrize("load", [
        pytest.param(PYTORCH, id="loaded"),
        pytest.param(PYTHON, id="pytorch-not-loaded"),
    ])
    def test_other_shells(self, stand: Stand, venv: Path, shell: str, script: str, load: str
                          ) -> None:
        """The venv's own activate.csh and activate.fish, in a shell started under Lmod."""
        code, _, err = stand.shell(f"cd {venv}/bin\n{shell} -c '{script}'", load=load)
        assert code == 0, err
        warning = (f"torchstack: warning: the venv {venv} was made on modules that are not "
                   f"loaded: {PYTORCH}; run: module load {PYTORCH}\n")
        assert (warning in err) == (load == PYTHON)


class TestDoctor:
    def test_reports_the_constraints(self, stand: Stand, venv: Path) -> None:
        _, report = _doctor(stand, venv)
        assert one(report, "venv-constraints")["message"].startswith(
            f"venv made by torchstack on {PYTHON} {PYTORCH}: pip constraints "
            f"{venv / 'torchstack-constraints.txt'} pin ")
        assert one(report, "venv-constraints")["message"].endswith("(torch==2.13.0+cpu)")
        assert not [f for f in report["findings"] if f["code"].startswith("venv-")
                    and f["code"] != "venv-constraints"]

    def test_default_is_the_activated_venv(self, stand: Stand, venv: Path) -> None:
        """`torchstack doctor` of another Python, run in the activated venv, inspects it."""
        code, out, err = stand.shell(f"source {venv}/bin/activate\ncd {REPO}\n"
                                     f"{sys.executable} -m torchstack doctor --json")
        assert code in (0, 1), err
        report = json.loads(out)
        assert report["python"]["prefix"] == str(venv)
        assert one(report, "venv-constraints")["message"].endswith("(torch==2.13.0+cpu)")

    def test_modules_not_loaded(self, stand: Stand, venv: Path) -> None:
        _, report = _doctor(stand, venv, load="")
        assert one(report, "venv-modules-not-loaded")["fix"] == f"module load {PYTHON} {PYTORCH}"

    def test_second_torch_and_drift(self, stand: Stand, tmp_path: Path) -> None:
        drifted = tmp_path / "drifted"
        stand.make(drifted)
        code, _, err = stand.pip(drifted, "--no-deps", "torch==2.14.1",
                                 environ="PIP_CONSTRAINT=/dev/null ")
        assert code == 0, err
        code, report = _doctor(stand, drifted)
        assert code == 1
        site = drifted / SITE
        assert one(report, "venv-second-torch")["message"] == (
            f"a second torch, torch 2.14.1, is installed in the venv ({site}) beside the "
            f"torch 2.13.0+cpu of {PYTHON} {PYTORCH}")
        assert one(report, "venv-drift")["message"] == (
            f"torch 2.14.1 in the venv ({site}) contradicts its constraint "
            "torch==2.13.0+cpu from the modules")
        assert one(report, "venv-drift")["fix"] == f"pip uninstall torch in the venv {drifted}"

    def test_constraints_overridden_by_environment(self, stand: Stand, venv: Path) -> None:
        code, out, err = stand.shell(
            f"cd {REPO}\nexport PIP_CONSTRAINT=/dev/null\n{sys.executable} -m torchstack "
            f"doctor --json --python {venv}/bin/python")
        assert code in (0, 1), err
        found = findings(json.loads(out), "venv-constraints-overridden")
        assert [f["fix"] for f in found] == [
            f"unset PIP_CONSTRAINT, or add {venv / 'torchstack-constraints.txt'} to it"]


class TestRefusals:
    def test_no_pytorch_loaded(self, stand: Stand, tmp_path: Path) -> None:
        code, _, err = stand.torchstack("venv", str(tmp_path / "v"), load=PYTHON)
        assert code == 2
        assert err.endswith(
            f"torchstack: error: no PyTorch module is loaded: {stand.eb_env.python_root}"
            "/bin/python3 sees no torch (module load PyTorch/<version> first)\n")
        assert not (tmp_path / "v").exists()

    def test_python_of_another_venv(self, stand: Stand, venv: Path, tmp_path: Path) -> None:
        """With a venv active, `python3` is that venv's: a venv on it would lose the module's
        Python, so it is refused."""
        code, _, err = stand.shell(f"source {venv}/bin/activate\ncd {REPO}\n"
                                   f"{sys.executable} -m torchstack venv {tmp_path / 'v'}")
        assert code == 2
        assert err.endswith(f"torchstack: error: {venv}/bin/python3 is the Python of the venv "
                            f"{venv}, not of a loaded module: deactivate that venv or pass "
                            "--python\n")
        assert not (tmp_path / "v").exists()
