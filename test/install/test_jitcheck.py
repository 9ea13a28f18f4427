"""torchstack.install.jitcheck: the sanity-check script is valid Python and announces its success;
run against the real torch 2.13.0+cpu tree with the system's g++, through ninja and through
setuptools, it builds, loads and runs its operator, and a compiler with the other C++ ABI fails.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.extension_src import write_old_abi_compiler

from torchstack.install.jitcheck import SOURCE, SUCCESS, write_script


def string_assignments(tree: ast.Module) -> dict[str, str]:
    """Every `NAME = "constant"` in the script, at any depth."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


class TestWriteScript:
    def test_path_in_the_folder(self, tmp_path: Path) -> None:
        path = write_script(tmp_path)
        assert path == tmp_path / "torchstack_jit_check.py"
        assert path.is_file()

    def test_accepts_a_str_folder(self, tmp_path: Path) -> None:
        assert write_script(str(tmp_path)) == tmp_path / "torchstack_jit_check.py"

    def test_compiles(self, tmp_path: Path) -> None:
        path = write_script(tmp_path)
        compile(path.read_text(encoding="utf-8"), str(path), "exec")

    def test_prints_success(self, tmp_path: Path) -> None:
        text = write_script(tmp_path).read_text(encoding="utf-8")
        assert SUCCESS in text
        calls = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)]
        printed = [
            ast.literal_eval(call.args[0]) for call in calls
            if isinstance(call.func, ast.Name) and call.func.id == "print"
        ]
        assert printed == [SUCCESS]

    def test_braces_of_the_template_are_unescaped(self, tmp_path: Path) -> None:
        # the script is an f-string: doubled braces must come out single, for C++ and dicts
        text = write_script(tmp_path).read_text(encoding="utf-8")
        assert "{{" not in text
        assert "}}" not in text
        strings = string_assignments(ast.parse(text))
        assert strings["SOURCE"] == SOURCE
        assert "static at::Tensor twice(const at::Tensor& x) { return x.mul(2); }" in SOURCE
        assert "TORCH_LIBRARY(torchstack_jit_check, m) {" in SOURCE

    def test_overwrites_an_earlier_script(self, tmp_path: Path) -> None:
        (tmp_path / "torchstack_jit_check.py").write_text("raise SystemExit(1)\n")
        assert SUCCESS in write_script(tmp_path).read_text(encoding="utf-8")


# -- the script run for real ---------------------------------------------------------------

Factory = Callable[[str], Path]
TOOLS = ("gcc", "g++", "c++", "as", "ld")


def run_check(site_packages: Path, folder: Path,
              **env: str) -> subprocess.CompletedProcess[str]:
    script = write_script(folder)
    environ = dict(os.environ, PYTHONPATH=str(site_packages), **env)
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=environ,
                          capture_output=True, text=True, check=False, timeout=600)


def tools_without_ninja(folder: Path) -> str:
    """A PATH of the compiler tools alone: torch then builds through setuptools."""
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is not installed: run scripts/setup"
        (folder / tool).symlink_to(found)
    return str(folder)


class TestRealBuild:
    def test_through_ninja(self, real_tree: Factory, tmp_path: Path) -> None:
        assert shutil.which("ninja"), "ninja is not installed: run scripts/setup"
        result = run_check(real_tree("torch-2.13.0"), tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().splitlines()[-1] == SUCCESS

    def test_through_setuptools_without_ninja(self, real_tree: Factory,
                                              tmp_path: Path) -> None:
        path = tools_without_ninja(tmp_path / "bin")
        result = run_check(real_tree("torch-2.13.0"), tmp_path, PATH=path)
        assert result.returncode == 0, result.stderr[-3000:]
        assert SUCCESS in result.stdout

    @pytest.mark.parametrize("ninja", [True, False], ids=["ninja", "setuptools"])
    def test_other_cxx_abi_fails_at_load(self, real_tree: Factory, tmp_path: Path,
                                         ninja: bool) -> None:
        # torch passes -D_GLIBCXX_USE_CXX11_ABI=1; a compiler that forces the old ABI builds a
        # library whose std::string symbols libtorch does not have
        compiler = write_old_abi_compiler(tmp_path / "old-abi-g++")
        env = {"CXX": str(compiler), "CC": str(compiler)}  # setuptools compiles with CC
        if not ninja:
            env["PATH"] = tools_without_ninja(tmp_path / "bin")
        result = run_check(real_tree("torch-2.13.0"), tmp_path, **env)
        assert result.returncode != 0
        assert SUCCESS not in result.stdout
        assert "Could not load this library" in result.stderr, result.stderr[-3000:]
