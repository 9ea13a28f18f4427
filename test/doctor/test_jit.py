"""torchstack.doctor.jit: whether JIT extension builds can work (toolkit, compiler, ninja)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.doctorenv import (
    FIELD_FIX,
    NINJA_PATH,
    Factory,
    clean_environ,
    doctor,
    findings,
    no_cuda,
    one,
)

from torchstack.doctor.jit import find_compiler, find_toolkit, torch_compiler


class TestJit:
    def test_field_case_cuda_torch_ninja_no_toolkit(self, cu13_full_venv: Path,
                                                   tmp_path: Path) -> None:
        _, report = doctor(cu13_full_venv / "bin" / "python", clean_environ(PATH=NINJA_PATH),
                           "--default-cuda-home", no_cuda(tmp_path))
        found = one(report, "jit-no-cuda-toolkit")
        assert found["severity"] == "problem"
        assert found["fix"] == FIELD_FIX
        assert ("packages that JIT-compile CUDA extensions when ninja is present (e.g. "
                "DeformableDetr's MultiScaleDeformableAttention in older transformers) will "
                "fail with 'CUDA_HOME environment variable is not set'") in found["message"]

    def test_cuda_home_pointing_nowhere(self, cu13_full_venv: Path, tmp_path: Path) -> None:
        environ = clean_environ(PATH=NINJA_PATH, CUDA_HOME=str(tmp_path / "gone"))
        _, report = doctor(cu13_full_venv / "bin" / "python", environ)
        found = one(report, "jit-no-cuda-toolkit")
        assert found["severity"] == "problem" and found["fix"] == FIELD_FIX
        assert f"$CUDA_HOME is {tmp_path / 'gone'}, which does not exist" in found["message"]

    def test_without_ninja_only_info(self, cu13_full_venv: Path, tmp_path: Path) -> None:
        bin_dir = tmp_path / "bin"  # a PATH with a compiler but neither ninja nor nvcc
        bin_dir.mkdir()
        (bin_dir / "c++").symlink_to("/usr/bin/c++")
        _, report = doctor(cu13_full_venv / "bin" / "python", clean_environ(PATH=str(bin_dir)),
                           "--default-cuda-home", no_cuda(tmp_path))
        assert one(report, "jit-no-cuda-toolkit")["severity"] == "info"
        assert one(report, "jit-no-ninja")["severity"] == "info"

    @pytest.mark.parametrize("environ", [
        {"CUDA_HOME": "/usr/local/cuda"},  # as a CUDA module sets it
        {"PATH": "/usr/local/cuda/bin:" + NINJA_PATH},  # the toolkit's own nvcc on PATH
    ], ids=["cuda-home", "nvcc-on-path"])
    def test_machine_toolkit_fits_torch(self, cu13_full_venv: Path, tmp_path: Path,
                                        environ: dict[str, str]) -> None:
        env = clean_environ(**{"PATH": NINJA_PATH, **environ})
        _, report = doctor(cu13_full_venv / "bin" / "python", env,
                           "--default-cuda-home", no_cuda(tmp_path))
        found = one(report, "jit-cuda-toolkit")
        assert found["message"].startswith("CUDA toolkit 13.0 at /usr/local/cuda ")
        assert found["message"].endswith("fits torch's CUDA 13.0")
        assert findings(report, "jit-no-cuda-toolkit") == []
        assert report["jit"]["toolkit"]["version"] == "13.0"

    def test_nvcc_wrapper_outside_the_toolkit(self, cu13_full_venv: Path) -> None:
        # /usr/local/bin/nvcc is a script calling the toolkit's nvcc: cpp_extension takes
        # /usr/local as CUDA_HOME, which has no CUDA headers.
        env = clean_environ(PATH="/usr/local/bin:" + NINJA_PATH)
        _, report = doctor(cu13_full_venv / "bin" / "python", env)
        found = one(report, "jit-no-cuda-toolkit")
        assert "nvcc on PATH (/usr/local/bin/nvcc) gives /usr/local, which has no " \
               "include/cuda_runtime.h" in found["message"]

    def test_compiler_against_torch_build(self, cpu_venv: Path, tmp_path: Path) -> None:
        _, report = doctor(cpu_venv / "bin" / "python", clean_environ(PATH=NINJA_PATH))
        gcc_major = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True,
                                   check=True).stdout.strip().split(".")[0]
        assert report["jit"]["torch_compiler"].startswith("GCC 13.")
        if gcc_major == "13":
            assert one(report, "jit-compiler")["severity"] == "info"
        else:
            found = one(report, "jit-compiler-mismatch")
            assert found["severity"] == "warning"
            assert found["fix"].startswith("load a GCC 13 module")


class TestCpuTorch:
    def test_no_cuda_jit_problem_with_ninja_and_no_toolkit(self, cpu_venv: Path,
                                                          tmp_path: Path) -> None:
        _, report = doctor(cpu_venv / "bin" / "python", clean_environ(PATH=NINJA_PATH),
                           "--default-cuda-home", no_cuda(tmp_path))
        assert findings(report, "jit-no-cuda-toolkit") == []
        assert one(report, "jit-cpu")["severity"] == "info"
        assert report["jit"]["toolkit"] is None
        assert report["jit"]["ninja"] == "/usr/bin/ninja"


def toolkit(root: Path, version: str, *, headers: bool = True, how: str = "json") -> Path:
    """A CUDA toolkit folder: bin/nvcc (a script printing its release line), headers and
    version.json, version.txt or neither (then nvcc --version tells)."""
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version}, V{version}.1'\n")
    nvcc.chmod(0o755)
    if headers:
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime.h").write_text("/* stand-in */\n")
    if how == "json":
        (root / "version.json").write_text(json.dumps({"cuda": {"version": f"{version}.2"}}))
    elif how == "txt":
        (root / "version.txt").write_text(f"CUDA Version {version}.2\n")
    return root


class TestFindToolkit:
    @pytest.mark.parametrize(("how", "version"), [("json", "12.8"), ("txt", "11.8"),
                                                  ("nvcc", "13.0")])
    def test_version_sources(self, tmp_path: Path, how: str, version: str) -> None:
        home = toolkit(tmp_path / "cuda", version, how=how)
        found = find_toolkit({"CUDA_HOME": str(home)}, no_cuda(tmp_path))
        assert (found.home, found.how, found.version, found.defect) == \
            (str(home), "$CUDA_HOME", version, None)

    def test_cpp_extension_search_order(self, tmp_path: Path) -> None:
        first = toolkit(tmp_path / "first", "12.8")
        on_path = toolkit(tmp_path / "on-path", "12.6")
        default = toolkit(tmp_path / "default", "12.4")
        path = str(on_path / "bin")
        # CUDA_HOME, an empty one falling through to CUDA_PATH, nvcc on PATH, the default
        assert find_toolkit({"CUDA_HOME": str(first), "PATH": path}, str(default)).home == \
            str(first)
        assert find_toolkit({"CUDA_HOME": "", "CUDA_PATH": str(first)}, str(default)).how == \
            "$CUDA_PATH"
        found = find_toolkit({"PATH": path}, str(default))
        assert (found.home, found.how) == (str(on_path), f"nvcc on PATH ({path}/nvcc)")
        assert find_toolkit({"PATH": "/nowhere"}, str(default)).how == "the default location"

    def test_none_found(self, tmp_path: Path) -> None:
        found = find_toolkit({"PATH": "/nowhere"}, no_cuda(tmp_path))
        assert found.home is None and not found.usable
        assert found.defect == ("no CUDA toolkit: $CUDA_HOME and $CUDA_PATH are unset, no nvcc "
                                f"on PATH, no {no_cuda(tmp_path)}")

    def test_toolkit_without_headers(self, tmp_path: Path) -> None:
        home = toolkit(tmp_path / "cuda", "13.0", headers=False)
        found = find_toolkit({"CUDA_HOME": str(home)})
        assert found.defect == f"$CUDA_HOME gives {home}, which has no include/cuda_runtime.h"

    def test_this_machines_toolkit(self) -> None:
        found = find_toolkit({"CUDA_HOME": "/usr/local/cuda"})
        assert (found.version, found.usable) == ("13.0", True)


class TestCompiler:
    def test_the_c_plus_plus_on_path(self) -> None:
        found = find_compiler({"PATH": NINJA_PATH})
        version = subprocess.run(["c++", "-dumpfullversion"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        assert (found.path, found.family, found.version) == ("/usr/bin/c++", "gcc", version)

    def test_cxx_that_does_not_exist(self) -> None:
        assert find_compiler({"PATH": NINJA_PATH, "CXX": "g++-99"}).path is None

    def test_torch_was_built_with(self, real_tree: Factory) -> None:
        assert torch_compiler(str(real_tree("torch-2.13.0"))) == "GCC 13.3.1"
