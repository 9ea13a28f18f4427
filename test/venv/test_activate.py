"""The activation lines of each shell, run by the real bash, tcsh and fish."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from torchstack.venv import activate

MODULES = ["Python/3.11.7", "PyTorch/2.13.0-whl"]
SHELLS = {"sh": ["bash", "-c", 'source "$1"', "bash"], "csh": ["tcsh", "-c", "source $1:q"],
          "fish": ["fish", "-c", "source $argv[1]"]}


def _activate(tmp_path: Path, shell: str, loaded: str | None, venv: Path) -> str:
    script = tmp_path / f"activate.{shell}"
    script.write_text(activate.snippet(shell, venv, MODULES))
    environ = {k: v for k, v in os.environ.items() if k != "LOADEDMODULES"}
    if loaded is not None:
        environ["LOADEDMODULES"] = loaded
    command = SHELLS[shell] + [str(script)]
    if shell == "csh":  # tcsh -c passes no arguments to the command: name the file in it
        command = ["tcsh", "-c", f"source '{script}'"]
    run = subprocess.run(command, env=environ, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""
    return run.stderr


@pytest.mark.parametrize("shell", sorted(SHELLS))
class TestSnippet:
    @pytest.mark.parametrize(("loaded", "missing"), [
        pytest.param("Python/3.11.7:PyTorch/2.13.0-whl", None, id="all-loaded"),
        pytest.param("gompi/2025a:Python/3.11.7:PyTorch/2.13.0-whl", None, id="among-others"),
        pytest.param("Python/3.11.7:PyTorch/2.14.1", "PyTorch/2.13.0-whl", id="other-pytorch"),
        pytest.param("", "Python/3.11.7 PyTorch/2.13.0-whl", id="none-loaded"),
        pytest.param(None, "Python/3.11.7 PyTorch/2.13.0-whl", id="no-module-system"),
        # a prefix of a loaded name is not that module
        pytest.param("Python/3.11.7:PyTorch/2.13.0-whl-x", "PyTorch/2.13.0-whl", id="prefix"),
    ])
    def test_warning(self, tmp_path: Path, shell: str, loaded: str | None,
                     missing: str | None) -> None:
        venv = tmp_path / "venv"
        err = _activate(tmp_path, shell, loaded, venv)
        if missing is None:
            assert err == ""
        else:
            assert err == (f"torchstack: warning: the venv {venv} was made on modules that "
                           f"are not loaded: {missing}; run: module load {missing}\n")

    def test_venv_path_with_quotes_and_spaces(self, tmp_path: Path, shell: str) -> None:
        venv = tmp_path / "my venv" / "it's $HOME"
        err = _activate(tmp_path, shell, "", venv)
        assert err.startswith(f"torchstack: warning: the venv {venv} was made on modules")


class TestInstall:
    def test_appends_once(self, tmp_path: Path) -> None:
        (tmp_path / "activate").write_text("# venv's own\n")
        first = activate.install(tmp_path, tmp_path, MODULES)
        assert list(first) == [tmp_path / "activate"]  # only the scripts that exist
        (tmp_path / "activate").write_text(first[tmp_path / "activate"])
        again = activate.install(tmp_path, tmp_path, MODULES)
        assert again[tmp_path / "activate"] == first[tmp_path / "activate"]
        assert first[tmp_path / "activate"].startswith("# venv's own\n")
