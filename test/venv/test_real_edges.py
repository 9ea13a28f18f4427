"""`torchstack venv` at awkward paths, with a wrong Python, and killed half-way, on the real
PyTorch/2.13.0-whl module (real eb, real Lmod, real venvs, the stand's local index)."""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path

import pytest
from support.doctorenv import REPO, findings, one
from support.venvstand import PYTHON, PYTORCH, Stand, q

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def other_python() -> str:
    """A real CPython of another minor version than the module's torch was built for."""
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = [p for p in sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3.*")
                               + glob.glob("/usr/bin/python3.*"))
             if p.rpartition("python")[2] not in (mine, f"{mine}-config")
             and p.rpartition("python")[2].replace(".", "").isdigit()
             and int(p.rpartition(".")[2]) >= 8]
    if not found:
        pytest.fail(f"no Python 3 other than {mine} on this machine (pyenv or /usr/bin)")
    return found[-1]


class TestAwkwardPaths:
    @pytest.mark.parametrize("name", [
        pytest.param("my envs/torch venv", id="space"),
        pytest.param("odd #;%'é/v", id="hash-semicolon-percent-quote-non-ascii"),
        pytest.param("long" * 30 + "/v", id="shebang-longer-than-a-kernel-reads"),
    ])
    def test_pip_keeps_the_constraints_and_scripts_run(
            self, stand: Stand, tmp_path: Path, name: str) -> None:
        venv = tmp_path / name
        made = stand.make(venv)
        code, out, err = stand.pip(venv, "purepkg")
        assert code == 0, out + err
        code, out, err = stand.pip(venv, "torchpin")
        assert code == 1
        assert "The user requested (constraint) torch==2.13.0+cpu" in out
        code, out, err = stand.shell(f"source {q(venv / 'bin' / 'activate')}\n"
                                     "command -v torchrun\ntorchrun --help")
        assert code == 0, err
        assert out.splitlines()[0] == str(venv / "bin" / "torchrun")
        assert "usage: torchrun" in out
        assert f"activate: source {q(venv / 'bin' / 'activate')}\n" in made

    def test_doctor_sees_the_constraints_wired(self, stand: Stand, tmp_path: Path) -> None:
        venv = tmp_path / "my envs" / "v"
        stand.make(venv)
        code, out, err = stand.torchstack("doctor", "--json", "--python",
                                          str(venv / "bin" / "python"))
        assert code in (0, 1), err
        report = json.loads(out)
        assert one(report, "venv-constraints")["message"].endswith("(torch==2.13.0+cpu)")
        assert not findings(report, "venv-constraints-unwired")

    @pytest.mark.parametrize("name", [
        pytest.param("a$b", id="dollar"),
        pytest.param('a"b', id="double-quote"),
        pytest.param("a:b", id="colon"),
    ])
    def test_refused_before_anything_is_written(self, stand: Stand, tmp_path: Path,
                                                name: str) -> None:
        code, _, err = stand.torchstack("venv", str(tmp_path / "new" / name))
        assert code == 2
        assert err.endswith(f"cannot hold a venv: it has {_what(name)}, which the activate "
                            "scripts of Python's venv or $PATH would mangle; choose another "
                            "folder\n")
        assert not (tmp_path / "new").exists()


def _what(name: str) -> str:
    return {"$": "a dollar sign", '"': "a double quote", ":": "a colon"}[name[1]]


class TestOtherPython:
    """Another Python first on PATH than the module's: it sees the module's site-packages
    through $PYTHONPATH, but cannot import the torch built for the module's Python."""

    @pytest.mark.parametrize("existed", [
        pytest.param(False, id="absent"),
        pytest.param(True, id="empty-folder"),
    ])
    def test_first_on_path_refused(self, stand: Stand, other_python: str, tmp_path: Path,
                                   existed: bool) -> None:
        target = tmp_path / "v"
        if existed:
            target.mkdir()
        bindir = tmp_path / "other-bin"
        bindir.mkdir()
        (bindir / "python3").symlink_to(other_python)
        code, _, err = stand.torchstack("venv", str(target),
                                        before=f"export PATH={q(bindir)}:\"$PATH\"\n")
        assert code == 2
        assert err.count("torchstack: error:") == 1
        version = other_python.rpartition("python")[2]
        module_python = stand.eb_env.python_root / "bin" / f"python{_mine()}"
        line = err.splitlines()[-1]
        assert line.startswith(f"torchstack: error: {bindir / 'python3'} is Python {version}, "
                               f"but the torch of module {PYTORCH} in ")
        assert (f"is built for Python {_mine()} (_C.cpython-{_mine().replace('.', '')}-") in line
        assert line.endswith(f"make the venv with the module's Python, {module_python} of "
                             f"module {PYTHON} (--python {module_python}, or put it first "
                             "on PATH)")
        assert target.exists() == existed
        assert not existed or not any(target.iterdir())

    def test_the_named_python_works(self, stand: Stand, other_python: str,
                                    tmp_path: Path) -> None:
        """The control: the Python the refusal names makes the venv."""
        module_python = stand.eb_env.python_root / "bin" / f"python{_mine()}"
        bindir = tmp_path / "other-bin"
        bindir.mkdir()
        (bindir / "python3").symlink_to(other_python)
        code, _, err = stand.torchstack("venv", str(tmp_path / "v"), "--python",
                                        str(module_python),
                                        before=f"export PATH={q(bindir)}:\"$PATH\"\n")
        assert code == 0, err


def _mine() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


class TestKilled:
    def _start(self, venv: Path) -> str:
        """Shell lines that start `torchstack venv` as its own process group and wait
        until `python -m venv` has begun writing into the venv."""
        return (f"set -m\ncd {q(REPO)}\n{q(sys.executable)} -m torchstack venv {q(venv)} &\n"
                "pid=$!\n"
                f"for i in $(seq 600); do [ -e {q(venv / 'bin' / 'python')} ] && break; "
                "sleep 0.1; done\n")

    def test_sigterm_leaves_no_venv(self, stand: Stand, tmp_path: Path) -> None:
        venv = tmp_path / "new" / "v"
        code, _, err = stand.shell(self._start(venv) + "kill -TERM $pid\nwait $pid")
        assert code == 143, err
        assert "torchstack: terminated" in err
        assert not (tmp_path / "new").exists()

    def test_kill_9_is_told_on_the_rerun(self, stand: Stand, tmp_path: Path) -> None:
        """A kill -9 of the whole process group cannot be cleaned up after: the venv stays
        half made, and the next run says so instead of taking or refusing it blindly."""
        venv = tmp_path / "v"
        code, _, err = stand.shell(self._start(venv) + "kill -KILL -- -$pid\nwait $pid")
        assert code == 137, err
        assert (venv / ".torchstack-venv-incomplete").is_file()
        before = sorted(os.listdir(venv))
        code, _, err = stand.torchstack("venv", str(venv))
        assert code == 2
        assert err.endswith(f"torchstack: error: {str(venv)!r} holds a venv that torchstack "
                            "venv did not finish (it was killed): remove that folder and run "
                            "torchstack venv again\n")
        assert sorted(os.listdir(venv)) == before
