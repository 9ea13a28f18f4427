"""Pins: what the constraints file says for each module-provided distribution."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchstack.venv.pins import Pin, constraints_text, modules_of, pip_conf_text


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
