"""`torchstack doctor`: each diagnosis on a real environment, and its fix.

The environments are real venvs with the real wheels (see doctorenv.py): torch 2.14.1 with and
without its nvidia wheels, torch 2.13.0+cpu alone and beside torchvision 0.28.0, venvs over a
module's torch through $PYTHONPATH and through EasyBuild's $EBPYTHONPREFIXES, and the real
eb-built PyTorch module under real Lmod. Doctor runs as a subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import cache_dir, cache_lock
from cudastack import make_module_roots, module_versions
from doctorenv import (
    REPO,
    TORCH_RUNTIME,
    TORCHVISION_RUNTIME,
    clean_environ,
    make_eb_python,
    make_venv,
    module_prefix,
    pip_wheels,
    run_doctor,
)
from ebenv import EasyBuildEnv

from torchstack.cli import main
from torchstack.distributions import tree_distributions
from torchstack.doctor import DoctorError, current, query
from torchstack.doctor._dynstr import dynstr_span, may_name_torch
from torchstack.doctor.findings import by_severity, exit_code, info, problem, warning
from torchstack.doctor.jit import find_compiler, find_toolkit, torch_compiler
from torchstack.doctor.placement import python_mismatch
from torchstack.doctor.remedies import library_fix
from torchstack.doctor.stack import read_stack
from torchstack.doctor.surroundings import Surroundings, eb_variable
from torchstack.fingerprint import Fingerprint, provider_fingerprint

Factory = Callable[[str], Path]
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
CUDNN_FIX = "load cuDNN/9.x or pip install nvidia-cudnn-cu13==9.24.0.43"
FIELD_FIX = "load a CUDA module or set CUDA_HOME, or uninstall ninja"
# The JIT checks ask PATH: /usr/bin has ninja and c++, but not this machine's nvcc.
NINJA_PATH = "/usr/bin:/bin"


def doctor(python: Path, environ: dict[str, str], *extra: str) -> tuple[int, dict[str, Any]]:
    """Run `doctor --json --python PYTHON`; the exit code and the parsed report."""
    run = run_doctor(["--json", "--python", str(python), *extra], environ)
    assert run.returncode in (0, 1), run.stderr
    return run.returncode, json.loads(run.stdout)


def findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def one(report: dict[str, Any], code: str, contains: str = "") -> dict[str, Any]:
    matching = [f for f in findings(report, code) if contains in f["message"]]
    assert len(matching) == 1, (code, contains, report["findings"])
    return matching[0]


def library(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [row for row in report["libraries"] if row["name"] == name]


def no_cuda(tmp_path: Path) -> str:
    """A default toolkit folder that does not exist (this machine has /usr/local/cuda)."""
    return str(tmp_path / "no-cuda")


# -- the environments ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def runtime_wheels() -> list[Path]:
    return pip_wheels(TORCH_RUNTIME)


@pytest.fixture(scope="session")
def cpu_venv(real_wheel: Factory, runtime_wheels: list[Path]) -> Path:
    """torch 2.13.0+cpu and what it imports."""
    return make_venv("cpu", [real_wheel("torch-2.13.0"), *runtime_wheels])


@pytest.fixture(scope="session")
def cpu_vision_venv(real_wheel: Factory, runtime_wheels: list[Path]) -> Path:
    """torch 2.13.0+cpu beside torchvision 0.28.0, the CUDA 13 build of PyPI."""
    wheels = [real_wheel("torch-2.13.0"), real_wheel("torchvision-0.28.0"), *runtime_wheels,
              *pip_wheels(TORCHVISION_RUNTIME)]
    return make_venv("cpu-vision", wheels)


@pytest.fixture(scope="session")
def cu13_bare_venv(real_wheel: Factory, runtime_wheels: list[Path]) -> Path:
    """torch 2.14.1 (CUDA 13) without any of the nvidia wheels it pins."""
    return make_venv("cu13-bare", [real_wheel("torch-2.14.1"), *runtime_wheels])


@pytest.fixture(scope="session")
def cu13_full_venv(cuda_stack: dict[str, Path]) -> Path:
    """torch 2.14.1 with every wheel it pins (about 5 GB, hard-linked from uv's cache)."""
    return make_venv("cu13-full", sorted(cuda_stack.values()))


@pytest.fixture(scope="session")
def eb_python() -> Path:
    return make_eb_python()


# -- which torch, its libraries --------------------------------------------------------------


class TestTorchWithoutNvidiaWheels:
    @pytest.fixture(scope="class")
    def result(self, cu13_bare_venv: Path) -> tuple[int, dict[str, Any]]:
        return doctor(cu13_bare_venv / "bin" / "python", clean_environ())

    def test_exit_code_says_problems(self, result: tuple[int, dict[str, Any]]) -> None:
        assert result[0] == 1
        assert result[1]["healthy"] is False

    def test_active_torch_and_fingerprint(self, result: tuple[int, dict[str, Any]],
                                          cu13_bare_venv: Path) -> None:
        torch = result[1]["torch"]
        assert torch["version"] == "2.14.1+cu130"
        assert torch["abi_tag"] == "torch-2.14.1-cxx11-cu13"
        assert torch["folder"] == str(cu13_bare_venv / SITE)

    def test_cudnn_missing_with_module_or_pinned_wheel(self, result: tuple[int, dict[str, Any]]
                                                       ) -> None:
        found = one(result[1], "library-missing", "libcudnn.so.9 not found")
        assert found["severity"] == "problem"
        assert found["fix"] == CUDNN_FIX
        assert "torch/lib/libtorch_cuda.so" in found["message"]

    @pytest.mark.parametrize(("soname", "fix"), [
        # toolkit libraries: the CUDA module of torch's major, or cuda-toolkit's extra
        ("libcublas.so.13", 'load CUDA/13.x or pip install "cuda-toolkit[cublas]==13.0.3"'),
        # a 0.x series: the minor matters
        ("libcusparseLt.so.0",
         "load cuSPARSELt/0.8.x or pip install nvidia-cusparselt-cu13==0.8.1"),
        ("libnccl.so.2", "load NCCL/2.x or pip install nvidia-nccl-cu13==2.30.7"),
    ], ids=["toolkit", "cusparselt", "nccl"])
    def test_other_missing_libraries(self, result: tuple[int, dict[str, Any]], soname: str,
                                     fix: str) -> None:
        assert one(result[1], "library-missing", f"{soname} not found")["fix"] == fix

    def test_driver_library_is_info_not_problem(self, result: tuple[int, dict[str, Any]]) -> None:
        found = one(result[1], "driver-library", "libcuda.so.1")
        assert found["severity"] == "info"
        assert not findings(result[1], "library-missing") or all(
            "libcuda.so.1" not in f["message"] for f in findings(result[1], "library-missing"))
        assert library(result[1], "libcuda.so.1")[0]["source"] == "driver"

    def test_system_library_row(self, result: tuple[int, dict[str, Any]]) -> None:
        # This machine's ld.so.conf lists /usr/local/cuda-13.0/lib, which has libcudart.
        rows = library(result[1], "libcudart.so.13")
        assert [r["source"] for r in rows] == ["system"]
        assert rows[0]["path"] == os.path.join("/usr/local/cuda-13.0/lib", "libcudart.so.13")

    def test_unmet_requirements_of_torch(self, result: tuple[int, dict[str, Any]]) -> None:
        found = one(result[1], "requirement-missing", "triton")
        assert found["message"] == ("torch 2.14.1+cu130 requires triton~=3.8.0, which is not "
                                    "on sys.path")

    def test_human_output_groups_by_severity_fix_below(self, cu13_bare_venv: Path) -> None:
        run = run_doctor(["--python", str(cu13_bare_venv / "bin" / "python")], clean_environ())
        assert run.returncode == 1
        lines = run.stdout.splitlines()
        headings = [line.split(" (")[0] for line in lines if line.endswith("):")]
        assert headings == ["problems", "warnings", "info"]
        at = next(i for i, line in enumerate(lines) if "libcudnn.so.9 not found" in line)
        assert lines[at + 1].strip() == f"fix: {CUDNN_FIX}"
        assert lines[at].startswith("  ") and lines[at + 1].startswith("      fix:")


class TestTorchWithNvidiaWheels:
    def test_every_library_resolves(self, cu13_full_venv: Path, tmp_path: Path) -> None:
        code, report = doctor(cu13_full_venv / "bin" / "python",
                              clean_environ(PATH=NINJA_PATH, CUDA_HOME="/usr/local/cuda"))
        assert findings(report, "library-missing") == []
        assert [r["source"] for r in library(report, "libcudnn.so.9")] == ["wheel"]
        assert library(report, "libcudnn.so.9")[0]["path"] == str(
            cu13_full_venv / SITE / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
        # libcudart: torch's RPATH finds the wheel's before the system's
        assert {r["source"] for r in library(report, "libcudart.so.13")} == {"wheel"}
        assert code == 0, [f for f in report["findings"] if f["severity"] == "problem"]

    def test_libraries_from_modules(self, cu13_bare_venv: Path, cuda_stack: dict[str, Path]
                                    ) -> None:
        """Stand-in CUDA, cuDNN, NCCL, ... modules made of the real libraries, as loaded."""
        with cache_lock("cuda-modules"):
            roots = make_module_roots(cache_dir() / "cuda-modules", cuda_stack)
        versions = module_versions(cuda_stack)
        environ = clean_environ(
            LD_LIBRARY_PATH=":".join(str(root / "lib") for root in roots.values()),
            LOADEDMODULES=":".join(f"{name}/{versions[name]}" for name in roots),
            **{f"EBROOT{name.upper()}": str(root) for name, root in roots.items()})
        _, report = doctor(cu13_bare_venv / "bin" / "python", environ)
        assert findings(report, "library-missing") == []
        row = library(report, "libcudnn.so.9")[0]
        assert row["source"] == "module"
        assert row["where"].startswith(f"module cuDNN/{versions['cuDNN']} ")


class TestCpuTorch:
    def test_healthy(self, cpu_venv: Path, tmp_path: Path) -> None:
        code, report = doctor(cpu_venv / "bin" / "python", clean_environ(PATH=NINJA_PATH),
                              "--default-cuda-home", no_cuda(tmp_path))
        assert code == 0, report["findings"]
        assert report["torch"]["abi_tag"] == "torch-2.13.0-cxx11-cpu"
        assert [f["severity"] for f in report["findings"]].count("problem") == 0

    def test_no_cuda_jit_problem_with_ninja_and_no_toolkit(self, cpu_venv: Path,
                                                          tmp_path: Path) -> None:
        _, report = doctor(cpu_venv / "bin" / "python", clean_environ(PATH=NINJA_PATH),
                           "--default-cuda-home", no_cuda(tmp_path))
        assert findings(report, "jit-no-cuda-toolkit") == []
        assert one(report, "jit-cpu")["severity"] == "info"
        assert report["jit"]["toolkit"] is None
        assert report["jit"]["ninja"] == "/usr/bin/ninja"

    def test_torchvision_built_for_cuda(self, cpu_vision_venv: Path) -> None:
        code, report = doctor(cpu_vision_venv / "bin" / "python", clean_environ())
        assert code == 1
        found = one(report, "consumer-incompatible", "torchvision 0.28.0")
        assert found["message"].endswith(
            "cannot run on torch 2.13.0+cpu: torchvision 0.28.0 links libtorch_cuda.so (cu13), "
            "torch 2.13.0+cpu is CPU-only")
        assert found["fix"] == ("pip install torchvision==0.28.0 --index-url "
                                "https://download.pytorch.org/whl/cpu (its cpu build), "
                                "or use torch 2.13.0 (cu13)")
        missing = one(report, "library-missing", "libtorch_cuda.so not found")
        assert "torchvision/_C.so" in missing["message"]
        assert "CPU-only: install builds of torchvision for torch 2.13.0+cpu" in missing["fix"]
        assert report["consumers"][0]["compatible"] is False


# -- JIT readiness ----------------------------------------------------------------------------


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


# -- venvs over modules -------------------------------------------------------------------------


class TestVenvOverModule:
    def test_pythonpath_module_hides_venv_torch(self, real_tree: Factory, real_wheel: Factory,
                                                runtime_wheels: list[Path]) -> None:
        venv = make_venv("sys-over-module", [real_wheel("torch-2.14.1"), *runtime_wheels],
                         system_site_packages=True)
        module_site = real_tree("torch-2.13.0")
        _, report = doctor(venv / "bin" / "python", clean_environ(PYTHONPATH=str(module_site)))
        assert report["torch"]["version"] == "2.13.0+cpu"
        found = one(report, "torch-shadowed")
        assert found["severity"] == "problem"
        assert found["message"] == (
            f"torch 2.13.0+cpu from $PYTHONPATH ({module_site}) shadows torch 2.14.1+cu130 "
            f"from the venv {venv} ({venv / SITE})")
        assert found["fix"].startswith(f"the venv's torch is never imported: pip uninstall "
                                       f"torch in the venv {venv}")

    def test_ebpythonprefixes_venv_torch_shadows_module(
            self, eb_python: Path, real_tree: Factory, real_wheel: Factory,
            runtime_wheels: list[Path], tmp_path: Path) -> None:
        venv = make_venv("eb-sys-venv", [real_wheel("torch-2.14.1"), *runtime_wheels],
                         python=str(eb_python), system_site_packages=True)
        prefix = module_prefix(tmp_path, real_tree("torch-2.13.0"))
        environ = clean_environ(EBPYTHONPREFIXES=str(prefix), EBROOTPYTORCH=str(prefix),
                                LOADEDMODULES="Python/3.11:PyTorch/2.13.0-whl")
        _, report = doctor(venv / "bin" / "python", environ)
        assert report["torch"]["version"] == "2.14.1+cu130"
        found = one(report, "torch-shadowed")
        assert found["message"].startswith(
            f"torch 2.14.1+cu130 from the venv {venv} ({venv / SITE}) shadows torch 2.13.0+cpu "
            "from module PyTorch/2.13.0-whl")
        assert found["fix"] == (f"pip uninstall torch in the venv {venv} to use the torch of "
                                "module PyTorch/2.13.0-whl, or unload PyTorch/2.13.0-whl")

    def test_user_site_shadows_module(self, eb_python: Path, real_tree: Factory,
                                      tmp_path: Path) -> None:
        """pip install --user: the user site comes before what $EBPYTHONPREFIXES adds."""
        prefix = module_prefix(tmp_path, real_tree("torch-2.13.0"))
        user_base = module_prefix(tmp_path / "user", real_tree("torch-2.14.1"))  # same layout
        user_site = user_base / SITE
        environ = clean_environ(EBPYTHONPREFIXES=str(prefix), EBROOTPYTORCH=str(prefix),
                                LOADEDMODULES="PyTorch/2.13.0-whl", PYTHONUSERBASE=str(user_base))
        _, report = doctor(eb_python, environ)
        found = one(report, "torch-shadowed")
        assert found["message"].startswith(
            f"torch 2.14.1+cu130 from the user site {user_site} ({user_site}) shadows "
            "torch 2.13.0+cpu from module PyTorch/2.13.0-whl")
        assert found["fix"].endswith("or export PYTHONNOUSERSITE=1")

    def test_venv_without_system_site_packages_cannot_see(
            self, eb_python: Path, real_tree: Factory, tmp_path: Path) -> None:
        venv = make_venv("eb-bare-venv", [], python=str(eb_python))
        prefix = module_prefix(tmp_path, real_tree("torch-2.13.0"))
        environ = clean_environ(EBPYTHONPREFIXES=str(prefix), EBROOTPYTORCH=str(prefix),
                                LOADEDMODULES="PyTorch/2.13.0-whl")
        code, report = doctor(venv / "bin" / "python", environ)
        assert code == 1 and report["torch"] is None
        assert one(report, "torch-missing")["severity"] == "problem"
        found = one(report, "module-torch-invisible")
        assert found["message"].startswith(
            f"module PyTorch/2.13.0-whl provides torch 2.13.0+cpu in {prefix / SITE}, but this "
            f"Python ({venv / 'bin' / 'python'}) does not see it: the venv was created without "
            "--system-site-packages")
        assert found["fix"] == ("recreate the venv from the module's Python with "
                                "python -m venv --system-site-packages")

    def test_default_is_the_running_interpreter(self, real_tree: Factory, real_wheel: Factory,
                                                runtime_wheels: list[Path]) -> None:
        venv = make_venv("sys-over-module", [real_wheel("torch-2.14.1"), *runtime_wheels],
                         system_site_packages=True)
        run = run_doctor(["--json"], clean_environ(), python=str(venv / "bin" / "python"))
        assert run.returncode in (0, 1), run.stderr
        report = json.loads(run.stdout)
        assert report["python"]["prefix"] == str(venv)
        assert report["torch"]["folder"] == str(venv / SITE)
        assert str(REPO) not in report["python"]["path"]  # doctor's own folder is not the user's


# -- the real module under Lmod -----------------------------------------------------------------


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


# -- the command line -------------------------------------------------------------------------


class TestCommandLine:
    def test_bad_python_is_usage_error(self, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
        missing = tmp_path / "python"
        assert main(["doctor", "--python", str(missing)]) == 2
        assert capsys.readouterr().err == (f"torchstack: error: {str(missing)!r} is not an "
                                           "executable file\n")

    def test_not_a_python(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["doctor", "--python", "/bin/false"]) == 2
        assert capsys.readouterr().err.startswith(
            "torchstack: error: '/bin/false' is not a working Python interpreter")

    def test_json_and_text_say_the_same(self, cu13_bare_venv: Path) -> None:
        python = str(cu13_bare_venv / "bin" / "python")
        data = json.loads(run_doctor(["--json", "--python", python], clean_environ()).stdout)
        text = run_doctor(["--python", python], clean_environ()).stdout
        for finding in data["findings"]:
            assert f"  {finding['message']}" in text
            assert finding["fix"] is None or f"fix: {finding['fix']}" in text


# -- the parts, on small real inputs ------------------------------------------------------------

STUB_C = "int stub(void) { return 0; }\n"


def gcc_library(out: Path, *, soname: str, needs: tuple[Path, ...] = ()) -> Path:
    source = out.with_suffix(".c")
    source.write_text(STUB_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source),
                    f"-Wl,-soname,{soname}", "-Wl,--no-as-needed", *map(str, needs)], check=True)
    return out


class TestDynstr:
    @pytest.fixture(scope="class")
    def libraries(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
        folder = tmp_path_factory.mktemp("dynstr")
        c10 = gcc_library(folder / "libc10.so", soname="libc10.so")
        libm = Path("/lib/x86_64-linux-gnu/libm.so.6")
        return {
            "consumer": gcc_library(folder / "ext.so", soname="ext.so", needs=(c10,)),
            "plain": gcc_library(folder / "plain.so", soname="plain.so", needs=(libm,)),
        }

    @pytest.mark.parametrize(("key", "expected"), [
        ("consumer", True),  # DT_NEEDED libc10.so
        ("plain", False),  # libm and libc only
    ])
    def test_real_objects(self, libraries: dict[str, Path], key: str, expected: bool) -> None:
        data = libraries[key].read_bytes()
        span = dynstr_span(data)
        assert span is not None and data[span[0]] == 0  # .dynstr starts with its empty name
        assert may_name_torch(data) is expected

    @pytest.mark.parametrize("data", [
        b"not an ELF file at all",  # not ELF
        b"\x7fELF\x02\x01\x01" + b"\0" * 9,  # a header cut short
    ], ids=["text", "truncated"])
    def test_what_it_cannot_read_stays_a_candidate(self, data: bytes) -> None:
        assert dynstr_span(data) is None
        assert may_name_torch(data) is True


class TestLibraryFix:
    @pytest.fixture(scope="class")
    def cuda_torch(self, real_tree: Factory) -> tuple[Fingerprint, tuple[str, ...]]:
        dist = next(d for d in tree_distributions(real_tree("torch-2.14.1")) if d.key == "torch")
        return provider_fingerprint(dist), dist.requires_dist

    @pytest.mark.parametrize(("soname", "fix"), [
        ("libcudnn.so.9", CUDNN_FIX),
        # a sub-library of cuDNN: the longest matching stem decides
        ("libcudnn_cnn.so.9", CUDNN_FIX),
        # cuBLASLt comes with the cuBLAS wheel, which the cuda-toolkit extra pulls in
        ("libcublasLt.so.13", 'load CUDA/13.x or pip install "cuda-toolkit[cublas]==13.0.3"'),
        ("libnvshmem_host.so.3", "load NVSHMEM/3.x or pip install nvidia-nvshmem-cu13==3.4.5"),
        # not of the CUDA ecosystem
        ("libfoo.so.1", "load the module that provides libfoo.so.1, or add the folder that "
                        "holds it to LD_LIBRARY_PATH"),
    ], ids=["cudnn", "cudnn-sub", "cublaslt", "nvshmem", "unknown"])
    def test_cuda_torch(self, cuda_torch: tuple[Fingerprint, tuple[str, ...]], soname: str,
                        fix: str) -> None:
        provider, requires = cuda_torch
        assert library_fix(soname, provider, requires, "3.11") == fix

    def test_without_pins_only_the_module(self) -> None:
        # a consumer's CUDA runtime, no torch metadata to pin a wheel: the soname's major
        assert library_fix("libcudart.so.13", None, (), "3.11") == "load CUDA/13.x"

    def test_torch_library_without_torch(self) -> None:
        assert library_fix("libc10.so", None, (), "3.11") == \
            "load a PyTorch module, or pip install torch"


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


class TestSurroundings:
    @pytest.mark.parametrize(("name", "variable"), [
        ("cuDNN", "CUDNN"), ("PyTorch", "PYTORCH"), ("Py-Foo", "PYMINFOO"), ("gc++", "GCPLUSPLUS"),
    ])
    def test_eb_variable(self, name: str, variable: str) -> None:
        assert eb_variable(name) == variable

    def test_modules_and_their_folders(self, tmp_path: Path) -> None:
        torch_root, cudnn_root = tmp_path / "PyTorch", tmp_path / "cuDNN"
        (torch_root / SITE).mkdir(parents=True)
        (cudnn_root / "lib").mkdir(parents=True)
        prefixes = tmp_path / "prefix"
        (prefixes / SITE).mkdir(parents=True)
        environ = {"EBROOTPYTORCH": str(torch_root), "EBROOTCUDNN": str(cudnn_root),
                   "EBROOTNOLOAD": str(tmp_path / "x"), "EBPYTHONPREFIXES": str(prefixes),
                   "LOADEDMODULES": "cuDNN/9.24.0.43-CUDA-13.0.2:PyTorch/2.14.1-whl",
                   "PYTHONPATH": f"{tmp_path / 'pp'}:"}
        found = Surroundings.from_environ(environ)
        assert [m.name for m in found.modules] == ["cuDNN/9.24.0.43-CUDA-13.0.2", "$EBROOTNOLOAD",
                                                   "PyTorch/2.14.1-whl"]
        owner = found.owner(str(cudnn_root / "lib" / "libcudnn.so.9"))
        assert owner is not None and owner.name.startswith("cuDNN/")
        sites = found.site_dirs(f"{sys.version_info[0]}.{sys.version_info[1]}")
        assert [(s.path, s.via) for s in sites] == [
            (str(tmp_path / "pp"), "PYTHONPATH"),
            (str(prefixes / SITE), "EBPYTHONPREFIXES"),
            (str(torch_root / SITE), "$EBROOT of PyTorch/2.14.1-whl"),
        ]


class TestInterpreter:
    def test_query_a_venv(self, cpu_venv: Path) -> None:
        found = query(str(cpu_venv / "bin" / "python"), clean_environ())
        assert found.version == sys.version_info[:2]
        assert found.prefix == str(cpu_venv)
        assert (found.in_venv, found.system_site_packages) == (True, False)
        assert str(cpu_venv / SITE) in found.path
        assert "" not in found.path

    def test_query_by_name_on_path(self, cpu_venv: Path) -> None:
        found = query("python", clean_environ(PATH=str(cpu_venv / "bin")))
        assert found.prefix == str(cpu_venv)

    def test_not_on_path(self) -> None:
        with pytest.raises(DoctorError, match=r"^'no-such-python' is not on PATH$"):
            query("no-such-python", {"PATH": "/nowhere"})


class TestFindings:
    def test_exit_code_and_groups(self) -> None:
        found = [info("a", "fine"), warning("b", "odd"), problem("c", "broken", "mend it")]
        assert exit_code(found) == 1 and exit_code(found[:2]) == 0
        assert {k: [f.code for f in v] for k, v in by_severity(found).items()} == \
            {"problem": ["c"], "warning": ["b"], "info": ["a"]}
        assert found[2].to_json() == {"severity": "problem", "code": "c", "message": "broken",
                                      "fix": "mend it"}


class TestPlacement:
    def test_torch_built_for_another_python(self, tmp_path: Path) -> None:
        package = tmp_path / "torch"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "version.py").write_text("__version__ = '2.14.1+cpu'\n")
        (package / "_C.cpython-399-x86_64-linux-gnu.so").write_bytes(b"")
        found = python_mismatch(read_stack([str(tmp_path)]), current())
        assert found is not None and found.severity == "problem"
        assert found.message == (
            f"torch 2.14.1+cpu in {tmp_path} is built for another Python "
            f"(_C.cpython-399-x86_64-linux-gnu.so), not Python {sys.version_info[0]}."
            f"{sys.version_info[1]}")

    def test_torch_for_this_python(self, real_tree: Factory) -> None:
        stack = read_stack([str(real_tree("torch-2.13.0"))])
        assert python_mismatch(stack, current()) is None
