"""torchstack generate on this machine's real wheels, and a generated set built by real eb.

A local index serves the real torch 2.13.0+cpu and 2.14.1 (CUDA 13, with every wheel it pins)
and torchvision 0.28.0 and 0.29.1. The generator must find the variants from the tags and the
CUDA pins, pick torchvision by its Requires-Dist (a range for the stable-ABI 0.29.1) and by its
build (the untagged 0.28.0 is a CUDA build: never a companion of torch 2.13.0+cpu), read a
megabyte instead of gigabytes, and write easyconfigs that EasyBuild accepts and, for the
system toolchain, really builds into a guarded module.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ebenv import PYTHON_VERSION, EasyBuildEnv, make_python_root
from support.indexserver import IndexServer
from support.wheelcache import cache_dir, cache_lock

from torchstack.cli import main
from torchstack.guards.record import FINGERPRINT_FILE


@pytest.fixture(scope="module")
def real_wheels(cuda_stack: dict[str, Path], real_wheel: object) -> list[Path]:
    extra = [real_wheel(key) for key in  # type: ignore[operator]
             ("torch-2.13.0", "torchvision-0.28.0", "torchvision-0.29.1")]
    return [*cuda_stack.values(), *extra]


@pytest.fixture
def real_index(real_wheels: list[Path]) -> Iterator[IndexServer]:
    with IndexServer(real_wheels) as server:
        yield server


def _generate(out: Path, *args: str) -> int:
    return main(["generate", *args, "--arch", "x86_64", "--out", str(out)])


class TestRealWheels:
    def test_cuda13_release(self, tmp_path: Path, real_index: IndexServer,
                            real_wheels: list[Path]) -> None:
        out = tmp_path / "out"
        assert _generate(out, "2.14.1", "--index", real_index.index_url,
                         "--toolchain", "foss/2023a") == 0
        torch = (out / "PyTorch-2.14.1-foss-2023a-CUDA-13.0.2-whl.eb").read_text()
        assert "torchstack_abi_tag = 'torch-2.14.1-cxx11-cu13'" in torch
        assert "('cuda-toolkit', '13.0.3.0', {" in torch  # the CUDA 13 style pin
        assert "('nvidia-cudnn-cu13', '9.24.0.43', {" in torch
        assert "('nvidia-cublas', '13.1.1.3', {" in torch  # from cuda-toolkit's extras
        assert "('Triton', '3.8.0', '-CUDA-13.0.2-whl')" in torch
        assert (out / "torchvision-0.29.1-foss-2023a-CUDA-13.0.2-whl.eb").is_file()  # torch>=2.14.0
        served = sum(w.stat().st_size for w in real_wheels)
        assert real_index.bytes_sent * 1000 < served, (real_index.bytes_sent, served)

    def test_cuda13_set_passes_easybuild_checks(self, tmp_path: Path, real_index: IndexServer,
                                                eb_env: EasyBuildEnv) -> None:
        out = tmp_path / "out"
        assert _generate(out, "2.14.1", "--index", real_index.index_url,
                         "--toolchain", "foss/2023a") == 0
        files = sorted(str(p) for p in out.glob("*.eb"))
        assert len(files) == 3  # Triton, PyTorch, torchvision
        checked = eb_env.run_eb("--check-contrib", *files, cwd=out)
        assert "All contribution checks PASSed!" in checked.stdout, checked.stdout[-3000:]
        stack = out / "easystack-foss-2023a-cu130-x86_64.yaml"
        planned = eb_env.run_eb("--dry-run", f"--robot={out}:", "--easystack", str(stack),
                                cwd=out)
        assert planned.returncode == 0, planned.stdout[-3000:]
        assert "Python-3.11.3-GCCcore-12.3.0.eb" in planned.stdout

    def test_cuda_modules_the_robot_path_lacks(self, tmp_path: Path, real_index: IndexServer,
                                              capsys: pytest.CaptureFixture[str]) -> None:
        # upstream has no cuDNN for CUDA 13.0.2: modules mode cannot be generated, and says
        # why, pin by pin, with what the robot path has
        code = _generate(tmp_path / "out", "2.14.1", "--index", real_index.index_url,
                         "--toolchain", "foss/2023a", "--cuda-libs", "modules")
        assert code == 2
        err = capsys.readouterr().err
        assert "cuda_libs='modules' cannot be served by the robot path" in err
        assert "nvidia-cudnn-cu13==9.24.0.43: needs cuDNN built with CUDA 13.0.2; the robot " \
               "path has cuDNN 9.23.0.39 (CUDA-13.3.0) for CUDA 13" in err
        for module in ("NCCL", "NVSHMEM", "cuSPARSELt"):
            assert f"needs {module} built with CUDA 13.0.2" in err

    def test_cpu_torch_takes_no_cuda_companion(self, tmp_path: Path, real_index: IndexServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
        # torchvision 0.28.0 pins torch==2.13.0, but this untagged build links libtorch_cuda
        # (CUDA 13): it must not be paired with torch 2.13.0+cpu
        out = tmp_path / "out"
        assert _generate(out, "2.13.0", "--index", real_index.index_url,
                         "--toolchain", "foss/2023a") == 0
        assert (out / "PyTorch-2.13.0-foss-2023a-whl.eb").is_file()
        assert not list(out.glob("torchvision-*"))
        report = capsys.readouterr().out
        assert "torchvision: not built: no release on" in report, report

    def test_range_reads_of_the_real_wheels(self, tmp_path: Path,
                                            real_wheels: list[Path]) -> None:
        with IndexServer() as server:
            for wheel in real_wheels:
                server.add_wheel(wheel, metadata="missing")
            assert _generate(tmp_path / "out", "2.14.1", "--index", server.index_url,
                             "--toolchain", "foss/2023a") == 0
            torch_hits = [h for h in server.hits
                          if "/torch-2.14.1" in h.path and h.path.endswith(".whl")]
        assert torch_hits and all(h.range for h in torch_hits)
        torch = next(w for w in real_wheels if w.name.startswith("torch-2.14.1"))
        # the zip directory of ~10,000 members and METADATA: about a megabyte of ~900
        assert sum(h.sent for h in torch_hits) * 200 < torch.stat().st_size


# -- a generated set, built ------------------------------------------------------------------

def _system_robot_path(folder: Path) -> Path:
    """A robot path whose Python is the test's stand-in Python module, with the packages its
    venv has as extensions, as a site's Python module lists them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"Python-{PYTHON_VERSION}.eb").write_text(textwrap.dedent(f"""\
        easyblock = 'ConfigureMake'
        name = 'Python'
        version = '{PYTHON_VERSION}'
        homepage = 'https://python.org/'
        description = "Python (stand-in of the torchstack tests)"
        toolchain = SYSTEM
        exts_list = [
            ('typing-extensions', '4.16.0'), ('sympy', '1.14.0'), ('mpmath', '1.3.0'),
            ('filelock', '3.20.0'), ('jinja2', '3.1.6'), ('markupsafe', '3.0.3'),
            ('fsspec', '2025.9.0'), ('networkx', '3.6.1'), ('setuptools', '80.9.0'),
            ('numpy', '2.3.4'), ('pillow', '11.3.0'),
        ]
        moduleclass = 'lang'
        """))
    return folder


@pytest.fixture(scope="module")
def built_set(tmp_path_factory: pytest.TempPathFactory,
              real_wheel: object) -> tuple[EasyBuildEnv, Path]:
    """PyTorch 2.13.0+cpu, generated for the system toolchain and built by its easystack."""
    root = tmp_path_factory.mktemp("generated-build")
    with cache_lock("pyroot"):
        env = EasyBuildEnv(root, make_python_root(cache_dir())).setup()
    wheels = [real_wheel("torch-2.13.0")]  # type: ignore[operator]
    robot = _system_robot_path(root / "robot")
    out = root / "generated"
    with IndexServer(wheels) as server:
        assert _generate(out, "2.13.0", "--index", server.index_url, "--toolchain", "system",
                         "--robot-paths", str(robot)) == 0
        easystack = out / "easystack-system-system-cpu-x86_64.yaml"
        result = env.run_eb("--easystack", str(easystack), f"--robot={out}:{robot}", cwd=out)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return env, out


class TestGeneratedSetBuilds:
    def test_module_fingerprinted_and_guarded(self, built_set: tuple[EasyBuildEnv, Path]) -> None:
        env, _ = built_set
        software = env.installpath / "software" / "PyTorch" / "2.13.0-whl"
        assert (software / FINGERPRINT_FILE).is_file()
        result = env.shell("module load PyTorch/2.13.0-whl\n"
                           "python -c 'import torch; print(torch.ones(2).sum().item())'\n"
                           "echo ABI=$TORCHSTACK_TORCH_ABI")
        assert result.returncode == 0, result.stderr
        assert "2.0" in result.stdout and "ABI=torch-2.13.0-cxx11-cpu" in result.stdout

    def test_predicted_abi_tag_is_checked(self, built_set: tuple[EasyBuildEnv, Path],
                                          real_wheel: object) -> None:
        """A wrong prediction in the easyconfig fails the build: the check is real."""
        env, out = built_set
        easyconfig = out / "PyTorch-2.13.0-whl.eb"
        wrong = env.root / "PyTorch-2.13.0-whl.eb"
        wrong.write_text(easyconfig.read_text().replace(
            "torchstack_abi_tag = 'torch-2.13.0-cxx11-cpu'",
            "torchstack_abi_tag = 'torch-2.13.0-cxx11-cu13'"))
        result = env.run_eb(str(wrong), "--rebuild", f"--robot={env.root / 'robot'}")
        assert result.returncode != 0
        assert "installed torch is torch-2.13.0-cxx11-cpu, the easyconfig declares " \
               "torch-2.13.0-cxx11-cu13" in result.stdout + result.stderr
