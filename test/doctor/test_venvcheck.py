"""doctor in a venv made by `torchstack venv`: the record, the pip.conf wiring, $PIP_CONSTRAINT.

The real venv on the real module (constraints reported, modules not loaded, a second torch
and drift) is in test/venv/test_real_module.py; these cases need only the venv's files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.stack import read_stack
from torchstack.doctor.venvcheck import active_venv_python, venv_findings

RECORD = {"schema": 1, "modules": ["PyTorch/2.13.0-whl"], "python": "/m/bin/python3",
          "torch": "2.13.0+cpu", "abi_tag": "torch-2.13.0-cxx11-cpu",
          "constraints": "torchstack-constraints.txt", "pins": {"torch": "2.13.0+cpu"}}


def _venv(root: Path, record: str | None = None, pip_conf: str | None = None) -> Interpreter:
    root.mkdir(parents=True, exist_ok=True)
    if record is not None:
        (root / "torchstack-venv.json").write_text(record)
    if pip_conf is not None:
        (root / "pip.conf").write_text(pip_conf)
    return Interpreter(str(root / "bin" / "python"), (3, 11), str(root), sys.base_prefix, (),
                       None, ())


def _codes(interpreter: Interpreter, environ: dict[str, str]) -> list[tuple[str, str]]:
    found = venv_findings(read_stack([]), interpreter, environ)
    return [(f.severity, f.code) for f in found]


LOADED = {"LOADEDMODULES": "PyTorch/2.13.0-whl"}


class TestVenvFindings:
    def test_not_a_torchstack_venv(self, tmp_path: Path) -> None:
        assert _codes(_venv(tmp_path / "v"), LOADED) == []

    def test_wired(self, tmp_path: Path) -> None:
        root = tmp_path / "v"
        wired = f"[install]\nconstraint = {root / 'torchstack-constraints.txt'}\n"
        assert _codes(_venv(root, json.dumps(RECORD), wired), LOADED) == [
            ("info", "venv-constraints")]

    @pytest.mark.parametrize("pip_conf", [
        pytest.param(None, id="no-pip-conf"),
        pytest.param("[install]\nconstraint = /elsewhere.txt\n", id="other-file"),
        pytest.param("[install\n", id="unparsable"),
    ])
    def test_unwired(self, tmp_path: Path, pip_conf: str | None) -> None:
        interpreter = _venv(tmp_path / "v", json.dumps(RECORD), pip_conf)
        assert _codes(interpreter, LOADED) == [("info", "venv-constraints"),
                                               ("warning", "venv-constraints-unwired")]

    def test_the_fix_is_a_line_pip_reads_back(self, tmp_path: Path) -> None:
        """At a path with a space, the advised line names the constraints as a file: URL,
        the form pip does not split; written as advised, the venv is wired."""
        root = tmp_path / "my envs" / "v"
        interpreter = _venv(root, json.dumps(RECORD))
        [unwired] = [f for f in venv_findings(read_stack([]), interpreter, LOADED)
                     if f.code == "venv-constraints-unwired"]
        line = unwired.fix.split("'")[3]
        assert line == f"constraint = {(root / 'torchstack-constraints.txt').as_uri()}"
        assert "%20" in line
        (root / "pip.conf").write_text(f"[install]\n{line}\n")
        assert _codes(interpreter, LOADED) == [("info", "venv-constraints")]

    def test_pip_constraint_variable_replaces_the_file(self, tmp_path: Path) -> None:
        root = tmp_path / "v"
        wired = f"[install]\nconstraint = {root / 'torchstack-constraints.txt'}\n"
        interpreter = _venv(root, json.dumps(RECORD), wired)
        assert _codes(interpreter, {**LOADED, "PIP_CONSTRAINT": "/x.txt"})[1:] == [
            ("warning", "venv-constraints-overridden")]
        both = f"/x.txt {root / 'torchstack-constraints.txt'}"
        assert _codes(interpreter, {**LOADED, "PIP_CONSTRAINT": both})[1:] == []

    @pytest.mark.parametrize("record", [
        pytest.param("{", id="not-json"),
        pytest.param("[]", id="not-an-object"),
        pytest.param('{"modules": []}', id="fields-missing"),
    ])
    def test_unreadable_record(self, tmp_path: Path, record: str) -> None:
        assert _codes(_venv(tmp_path / "v", record), LOADED) == [
            ("warning", "venv-record-unreadable")]


class TestActiveVenvPython:
    def test_activated_torchstack_venv(self, tmp_path: Path) -> None:
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "python").write_text("")
        (tmp_path / "torchstack-venv.json").write_text("{}")
        environ = {"VIRTUAL_ENV": str(tmp_path)}
        assert active_venv_python(environ, sys.prefix) == str(tmp_path / "bin" / "python")
        # the running Python is that venv's: nothing to switch to
        assert active_venv_python(environ, str(tmp_path)) is None

    def test_other_venvs_are_left_alone(self, tmp_path: Path) -> None:
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "python").write_text("")
        assert active_venv_python({"VIRTUAL_ENV": str(tmp_path)}, sys.prefix) is None
        assert active_venv_python({}, sys.prefix) is None
