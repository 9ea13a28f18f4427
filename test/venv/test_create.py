"""Refusals of `torchstack venv` before anything is written: one error line, exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torchstack.cli import main
from torchstack.doctor.interpreter import Interpreter
from torchstack.fingerprint.fromjson import from_json
from torchstack.venv import VenvError
from torchstack.venv.create import Plan, create

_MODULE_VARIABLES = ("PYTHONPATH", "EBPYTHONPREFIXES", "LOADEDMODULES")


@pytest.fixture
def no_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _MODULE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


class TestRefusals:
    def test_dir_not_empty(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_path / "file").write_text("")
        assert main(["venv", str(tmp_path), "--python", sys.executable]) == 2
        assert capsys.readouterr().err == (f"torchstack: error: {str(tmp_path)!r} exists and "
                                           "is not empty\n")
        assert [p.name for p in tmp_path.iterdir()] == ["file"]

    def test_dir_is_a_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        target = tmp_path / "file"
        target.write_text("")
        assert main(["venv", str(target), "--python", sys.executable]) == 2
        assert capsys.readouterr().err == (f"torchstack: error: {str(target)!r} exists and is "
                                           "not a folder\n")

    def test_no_pytorch_loaded(self, tmp_path: Path, no_modules: None,
                               capsys: pytest.CaptureFixture[str]) -> None:
        target = tmp_path / "venv"
        assert main(["venv", str(target), "--python", sys.executable]) == 2
        assert capsys.readouterr().err == (
            f"torchstack: error: no PyTorch module is loaded: {sys.executable} sees no torch "
            "(module load PyTorch/<version> first)\n")
        assert not target.exists()

    @pytest.mark.parametrize("name", [
        pytest.param("a$b", id="dollar"),
        pytest.param("a:b", id="colon"),
        pytest.param("a\nb", id="newline"),
    ])
    def test_path_the_venvs_files_would_mangle(self, tmp_path: Path, name: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
        target = tmp_path / "new" / name
        assert main(["venv", str(target), "--python", sys.executable]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"torchstack: error: {str(target)!r} cannot hold a venv: it has ")
        assert err.count("\n") == 1
        assert not (tmp_path / "new").exists()

    def test_venv_left_half_made_by_a_kill(self, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
        """The marker that only a finished `torchstack venv` removes: the re-run says what
        the folder is, and touches nothing."""
        (tmp_path / ".torchstack-venv-incomplete").write_text("")
        (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
        assert main(["venv", str(tmp_path), "--python", sys.executable]) == 2
        assert capsys.readouterr().err == (
            f"torchstack: error: {str(tmp_path)!r} holds a venv that torchstack venv did not "
            "finish (it was killed): remove that folder and run torchstack venv again\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == [".torchstack-venv-incomplete",
                                                               "pyvenv.cfg"]

    def test_module_torch_for_another_python(self, tmp_path: Path, no_modules: None,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
        """A PyTorch module for Python 3.99 reached through $EBROOTPYTORCH only: this Python
        does not see its torch, which is not 'no PyTorch module is loaded'."""
        site = tmp_path / "pytorch" / "lib" / "python3.99" / "site-packages"
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text("")
        python = tmp_path / "python" / "bin" / "python3.99"
        python.parent.mkdir(parents=True)
        python.write_text("")
        python.chmod(0o755)
        monkeypatch.setenv("EBROOTPYTORCH", str(tmp_path / "pytorch"))
        monkeypatch.setenv("EBROOTPYTHON", str(tmp_path / "python"))
        monkeypatch.setenv("LOADEDMODULES", "Python/3.99.0:PyTorch/9.9")
        target = tmp_path / "venv"
        assert main(["venv", str(target), "--python", sys.executable]) == 2
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        assert capsys.readouterr().err == (
            f"torchstack: error: module PyTorch/9.9 provides torch unknown in {site}, but this "
            f"Python ({sys.executable}) does not see it: it is for Python 3.99, this is Python "
            f"{version}; use the Python 3.99 that the module was built for ({python} of module "
            f"Python/3.99.0: --python {python})\n")
        assert not target.exists()

    def test_not_a_python(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["venv", str(tmp_path / "v"), "--python", "/bin/false"]) == 2
        assert capsys.readouterr().err.startswith(
            "torchstack: error: '/bin/false' is not a working Python interpreter")


class TestFailure:
    @pytest.mark.parametrize(("existed", "name"), [
        pytest.param(False, "venv", id="absent"),
        pytest.param(True, "venv", id="empty-folder"),
        # the folders made on the way to DIR go too
        pytest.param(False, "new/folders/venv", id="absent-parents"),
    ])
    def test_failed_venv_leaves_dir_as_it_was(self, tmp_path: Path, existed: bool, name: str
                                              ) -> None:
        target = tmp_path / name
        if existed:
            target.mkdir()
        interpreter = Interpreter("/bin/false", (3, 11), "/p", "/p", (), None, ())
        fingerprint = from_json({
            "schema": 1, "role": "provider", "name": "torch", "version": "2.13.0+cpu",
            "torch": {"release": "2.13.0", "local": "cpu", "cxx11_abi": True, "cuda": None,
                      "hip": None},
            "cuda_major": None, "abi_tag": "torch-2.13.0-cxx11-cpu"})
        made = Plan(target, interpreter, fingerprint, (), (), (), frozenset())
        with pytest.raises(VenvError, match=r"^/bin/false -m venv .* failed: no output$"):
            create(made, {})
        assert target.exists() == existed
        assert not existed or not any(target.iterdir())
        assert [p.name for p in tmp_path.iterdir()] == (["venv"] if existed else [])
