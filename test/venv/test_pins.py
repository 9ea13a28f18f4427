"""Pins: what the constraints file says for each module-provided distribution."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.placement import Places
from torchstack.doctor.stack import read_stack
from torchstack.doctor.surroundings import Surroundings
from torchstack.venv.pins import (
    Pin,
    constraints_text,
    module_distributions,
    module_pins,
    modules_of,
    pip_conf_text,
)


class TestLine:
    @pytest.mark.parametrize(("version", "line"), [
        pytest.param("2.13.0+cpu", "torch==2.13.0+cpu", id="local-tag-kept"),
        pytest.param("2.13.0", "torch==2.13.0", id="plain"),
        # what PEP 440 cannot parse is pinned by arbitrary equality, as pip compares it
        pytest.param("2.13.0-site-build", "torch===2.13.0-site-build", id="not-pep440"),
    ])
    def test_line(self, version: str, line: str) -> None:
        assert Pin("torch", version, "PyTorch/2.13.0-whl", "/m").line == line


class TestModulesOf:
    def test_in_load_order_without_unnamed(self) -> None:
        pins = [Pin("torch", "2.13.0", "PyTorch/2.13.0-whl", "/t"),
                Pin("numpy", "2.3.0", "SciPy-bundle/2025.06", "/s"),
                Pin("sympy", "1.14", "$EBROOTX", "/x"), Pin("six", "1.16", None, "/p")]
        loaded = ["GCCcore/14.2.0", "SciPy-bundle/2025.06", "PyTorch/2.13.0-whl"]
        assert modules_of(pins, loaded) == ["SciPy-bundle/2025.06", "PyTorch/2.13.0-whl"]


class TestFiles:
    def test_constraints_text(self) -> None:
        pins = [Pin("sympy", "1.14.0", "Python/3.11.7", "/py"),
                Pin("torch", "2.13.0+cpu", "PyTorch/2.13.0-whl", "/pt"),
                Pin("extra", "1.0", None, "/on/pythonpath")]
        text = constraints_text(pins, Path("/v"), ["Python/3.11.7", "PyTorch/2.13.0-whl"])
        body = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert body == ["sympy==1.14.0      # module Python/3.11.7",
                        "torch==2.13.0+cpu  # module PyTorch/2.13.0-whl",
                        "extra==1.0         # /on/pythonpath"]

    def test_pip_conf(self) -> None:
        assert pip_conf_text(Path("/v/c.txt")).endswith("[install]\nconstraint = /v/c.txt\n")


def _dist_info(site: Path, name: str, version: str) -> None:
    meta = site / f"{name.replace('-', '_')}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


class TestModuleDistributions:
    """What a PyTorch module with cuda_libs = 'modules' offers: torch, the dist-infos that
    stand in for nvidia wheels, setuptools; beside a base Python that no module provides."""

    def test_pins_what_modules_provide(self, tmp_path: Path) -> None:
        root = tmp_path / "software" / "PyTorch" / "2.14.1-CUDA-13.0-whl"
        module_site = root / "lib" / "python3.11" / "site-packages"
        _dist_info(module_site, "torch", "2.14.1+cu130")
        _dist_info(module_site, "nvidia-cudnn-cu13", "9.24.0.43")
        _dist_info(module_site, "setuptools", "80.9.0")
        base_site = tmp_path / "base" / "lib" / "python3.11" / "site-packages"
        _dist_info(base_site, "six", "1.16.0")
        environ = {"EBROOTPYTORCH": str(root), "LOADEDMODULES": "PyTorch/2.14.1-CUDA-13.0-whl",
                   "PYTHONPATH": str(module_site)}
        interpreter = Interpreter(str(tmp_path / "base" / "bin" / "python3"), (3, 11),
                                  str(tmp_path / "base"), str(tmp_path / "base"),
                                  (str(module_site), str(base_site)), None, ())
        places = Places(interpreter, Surroundings.from_environ(environ))
        provided = module_distributions(read_stack(interpreter.path), places)
        assert [(p.name, p.version, p.module) for p in provided] == [
            ("nvidia-cudnn-cu13", "9.24.0.43", "PyTorch/2.14.1-CUDA-13.0-whl"),
            ("setuptools", "80.9.0", "PyTorch/2.14.1-CUDA-13.0-whl"),
            ("torch", "2.14.1+cu130", "PyTorch/2.14.1-CUDA-13.0-whl"),
        ]
        assert [p.line for p in module_pins(provided)] == [
            "nvidia-cudnn-cu13==9.24.0.43", "torch==2.14.1+cu130"]
