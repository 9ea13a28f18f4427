"""What a site gets from `torchstack generate` on the installed easybuild-easyconfigs.

CUDA sets depend on a CUDA module in every cuda_libs mode, and `auto` says per pin why it took
the modules or the wheels; Triton sits where upstream puts it (gfbf); upstream namesakes are
named with their differences; indexes that do not answer are named and their variants reported
as not checked (exit 1), fast; and the printed build commands, run with `eb --dry-run` on the
real robot path, build the generated files, not upstream's namesakes.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ebenv import EasyBuildEnv
from support.indexserver import IndexServer
from support.releasewheels import wheels_fixture  # noqa: F401  (the fixture `wheels`)

from torchstack import cudalibs
from torchstack.cli import main
from torchstack.generator import cudamodules, toolchains
from torchstack.generator.release import Request, Resolver
from torchstack.index.protocol import IndexUnreachableError

CUDA = "('CUDA', '12.8.0', '', SYSTEM)"
AS_ROOT = "export EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES=1\n"  # as in run_eb


@pytest.fixture
def pypi(wheels: dict[str, list[Path]]) -> Iterator[IndexServer]:
    with IndexServer(wheels["pypi"]) as server:
        yield server


def _dead_url(variant: str) -> str:
    """A loopback index URL, named like a variant index, on a port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/{variant}/"


def _generate(out: Path, *args: str) -> int:
    return main(["generate", "2.9.1", "-v", "--toolchain", "foss/2025a", "--out", str(out),
                 *args])


class TestCudaSets:
    @pytest.mark.parametrize("mode", ["wheels", "modules", "auto"])
    def test_every_cuda_module_depends_on_cuda(self, tmp_path: Path, pypi: IndexServer,
                                               mode: str) -> None:
        # nvcc, ptxas and CUDA_HOME for JIT extensions and Triton, whichever way the libraries
        assert _generate(tmp_path / "out", "--index", pypi.index_url, "--variant", "cu128",
                         "--cuda-libs", mode) == 0
        for easyconfig in (tmp_path / "out").glob("*-CUDA-*.eb"):
            assert CUDA in easyconfig.read_text(), easyconfig.name

    def test_auto_takes_modules_that_satisfy_every_pin(
            self, tmp_path: Path, pypi: IndexServer, capsys: pytest.CaptureFixture[str]) -> None:
        # the test release pins cuDNN 9.10.2.21 and NCCL 2.27.5: upstream has cuDNN 9.10.1.4
        # and NCCL 2.27.7 for CUDA 12.8.0 within foss/2025a
        assert _generate(tmp_path / "out", "--index", pypi.index_url, "--variant", "cu128") == 0
        report = capsys.readouterr().out
        assert "cuda_libs='modules' (auto), CUDA 12.8.0" in report
        assert "ok: nvidia-cudnn-cu12==9.10.2.21: cuDNN 9.10.1.4 (CUDA-12.8.0)" in report
        text = (tmp_path / "out" / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        assert "cuda_libs = 'modules'" in text and "nvidia-cudnn" not in text

    def test_auto_takes_wheels_and_says_which_pin_failed(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        # PyPI's real torch 2.9.1 pins cuSPARSELt 0.7.1; upstream has 0.8.0.4 for CUDA 12.8.0
        assert _generate(tmp_path / "out", "--offline") == 0
        report = capsys.readouterr().out
        assert "cuda_libs='wheels' (auto), CUDA 12.8.0" in report
        assert "nvidia-cusparselt-cu12==0.7.1: cuSPARSELt 0.8.0.4 (CUDA-12.8.0) is another " \
               "series than 0.7.1; the robot path has cuSPARSELt" in report
        text = (tmp_path / "out" / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        assert "cuda_libs = 'wheels'" in text and "('nvidia-cusparselt-cu12', '0.7.1', {" in text

    def test_modules_asked_for_names_each_pin_and_what_the_robot_path_has(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert _generate(tmp_path / "out", "--offline", "--cuda-libs", "modules") == 0
        captured = capsys.readouterr()
        assert "skipped foss/2025a cu128: cuda_libs='modules' cannot be served by the robot " \
               "path: nvidia-cusparselt-cu12==0.7.1: cuSPARSELt 0.8.0.4" in captured.out
        assert not list((tmp_path / "out").glob("*-CUDA-*"))


class TestCudaModuleChoice:
    """cudamodules on the real robot path, with pins as torch's metadata states them."""

    @staticmethod
    def _pins(*lines: str) -> list[cudalibs.Pin]:
        return cudalibs.cuda_pins(lines, "3.13", "x86_64")

    def test_newer_minor_when_the_exact_one_is_missing(self) -> None:
        # CUDA 13.0.x is on the robot path for system; 12.7 is not: 12.8.0 serves it
        toolchain = toolchains.load_toolchain("foss/2025a")
        assert cudamodules.cuda_module(toolchain, "12.7").version == "12.8.0"
        assert cudamodules.cuda_module(toolchain, "13.0").version.startswith("13.0.")

    def test_no_module_of_the_major(self) -> None:
        with pytest.raises(cudamodules.CudaModulesError, match=r"no CUDA 99\.x module"):
            cudamodules.cuda_module(toolchains.load_toolchain("foss/2025a"), "99.0")

    @pytest.mark.parametrize(("pin", "verdict"), [
        ("nvidia-cudnn-cu12==9.10.2.21", "ok: "),  # 9.10.1.4: same major, same minor
        ("nvidia-cudnn-cu12==9.26.0.51", "is older than 9.26.0.51"),
        ("nvidia-cudnn-cu12==10.0.0.1", "is another series than 10.0.0.1"),
        ("nvidia-cusparselt-cu12==0.7.1", "is another series than 0.7.1"),  # 0.x: minor too
        ("nvidia-nvshmem-cu12==3.3.20", "ok: "),
    ], ids=["same-minor", "older", "other-major", "zero-major", "nvshmem"])
    def test_library_verdicts(self, pin: str, verdict: str) -> None:
        toolchain = toolchains.load_toolchain("foss/2025a")
        cuda = cudamodules.cuda_module(toolchain, "12.8")
        choice = cudamodules.choose(toolchain, self._pins(pin), cuda, "auto")
        assert verdict in choice.reasons[0]
        assert choice.cuda_libs == ("modules" if verdict == "ok: " else "wheels")

    def test_missing_module_names_what_there_is(self) -> None:
        toolchain = toolchains.load_toolchain("foss/2024a")  # NCCL for 12.8 is on GCCcore 14
        cuda = cudamodules.cuda_module(toolchain, "12.8")
        with pytest.raises(cudamodules.CudaModulesError,
                           match=r"nvidia-nccl-cu12==2\.27\.5: needs NCCL built with CUDA "
                                 r"12\.8\.0; the robot path has NCCL .*2\.27\.5 \(CUDA-12\.6\.0\)"):
            cudamodules.choose(toolchain, self._pins("nvidia-nccl-cu12==2.27.5"), cuda,
                               "modules")

    def test_toolkit_pin_checked_against_the_cuda_module(self) -> None:
        toolchain = toolchains.load_toolchain("foss/2025a")
        cuda = cudamodules.cuda_module(toolchain, "13.0")
        pins = self._pins("cuda-toolkit[cublas,cudart]==13.4.0")
        choice = cudamodules.choose(toolchain, pins, cuda, "auto")
        assert choice.cuda_libs == "wheels"
        assert f"CUDA {cuda.version} is older than 13.4.0" in choice.reasons[0]


class TestUpstreamPlacement:
    def test_triton_on_gfbf_and_namesakes_reported(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert _generate(tmp_path / "out", "--offline") == 0
        out = tmp_path / "out"
        assert (out / "Triton-3.5.1-gfbf-2025a-CUDA-12.8.0-whl.eb").is_file()
        torch = (out / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        assert "('Triton', '3.5.1', '-CUDA-12.8.0-whl')" in torch  # found via subtoolchains
        report = capsys.readouterr().out
        assert re.search(r"PyTorch-2\.9\.1-foss-2025a-CUDA-12\.8\.0-whl\.eb shadows upstream's "
                         r"\S+/PyTorch-2\.9\.1-foss-2025a-CUDA-12\.8\.0-whl\.eb on the robot "
                         r"path \(the output folder comes first\): easyblock PythonBundle -> "
                         r"PyTorchWheels; dependencies -CUDA-wheel-bundle 12\.8\.0", report)
        assert "Triton-3.5.1-gfbf-2025a-CUDA-12.8.0-whl.eb shadows upstream's" in report

    def test_companions_say_why_they_were_chosen(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert _generate(tmp_path / "out", "--offline", "--variant", "cu128") == 0
        report = capsys.readouterr().out
        assert "torchaudio-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb (x86_64): needs torch 2.9.1: " \
               "the newest torchaudio that runs on torch 2.9.1" in report
        # the companions walk back as every consumer does, saying what they passed over
        assert "torchaudio: 2.9.1 taken; newer releases passed over: 2.11.1 (requires " \
               "torch>=2.11); 2.11.0 (names no torch release in its Requires-Dist); 2.10.0 " \
               "(requires torch==2.10.0)" in report


class TestIndexesThatDoNotAnswer:
    def test_variant_index_down_is_reported_not_blamed_on_wheels(
            self, tmp_path: Path, pypi: IndexServer, capsys: pytest.CaptureFixture[str]) -> None:
        dead = _dead_url("cpu")
        code = _generate(tmp_path / "out", "--index", pypi.index_url, "--index", dead,
                         "--cuda-libs", "wheels")
        captured = capsys.readouterr()
        assert code == 1  # written, but incomplete
        assert f"index {dead} did not answer: " in captured.err
        assert "the host refuses connections" in captured.err
        assert "name the indexes to use with --index" in captured.err
        # the test PyPI has only the CUDA build: cpu is wholly the dead index's
        assert f"torch 2.9.1: cpu not checked: {dead} did not answer" in captured.out
        assert "no cpu wheel" not in captured.out
        assert (tmp_path / "out" / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").is_file()

    def test_variants_it_cannot_offer_are_complete(self, tmp_path: Path,
                                                   pypi: IndexServer) -> None:
        # a dead cpu index could not have offered cu128: that set is complete
        code = _generate(tmp_path / "out", "--index", pypi.index_url, "--index",
                         _dead_url("cpu"), "--variant", "cu128")
        assert code == 0

    def test_a_general_index_down_leaves_every_variant_unchecked(
            self, tmp_path: Path, pypi: IndexServer, capsys: pytest.CaptureFixture[str]) -> None:
        code = _generate(tmp_path / "out", "--index", pypi.index_url, "--index",
                         "https://mirror.invalid/simple/", "--variant", "cu128")
        assert code == 1
        assert "the host name does not resolve" in capsys.readouterr().err

    def test_asked_once_however_many_projects(self) -> None:
        class Dead:
            location = "https://download.example.invalid/whl/cu130/"
            calls = 0

            def files(self, project: str) -> list[object]:
                Dead.calls += 1
                raise IndexUnreachableError(f"{self.location}{project}/: the host name does "
                                            "not resolve")

        class Empty(Dead):
            location = "https://pypi.example.invalid/simple/"

            def files(self, project: str) -> list[object]:
                return []

        resolver = Resolver([Empty(), Dead()])  # type: ignore[list-item]
        for project in ("torch", "torchvision", "torchaudio", "triton"):
            resolver.files(resolver.indexes[1], project)
        assert Dead.calls == 1
        assert resolver.unchecked("cu130") == [Dead.location]
        assert resolver.unchecked("cpu") == []
        with pytest.raises(Exception, match="cu130 not checked"):
            resolver.resolve(Request("2.9.1", (3, 13)))

    def test_offline_catalog_replays_what_did_not_answer(
            self, tmp_path: Path, pypi: IndexServer, capsys: pytest.CaptureFixture[str]) -> None:
        catalog = tmp_path / "catalog"
        dead = _dead_url("cpu")
        assert main(["catalog", "refresh", "--release", "2.9.1", "--index", pypi.index_url,
                     "--index", dead, "--dir", str(catalog), "--toolchain", "foss/2025a"]) == 0
        recorded = json.loads((catalog / "torch-2.9.1.json").read_text())
        assert [i["location"] for i in recorded["indexes"] if i["unreachable"]] == [dead]
        capsys.readouterr()
        code = _generate(tmp_path / "out", "--offline", "--catalog", str(catalog))
        out = capsys.readouterr().out
        assert code == 0  # the catalog is what it is: its gaps are reported
        assert f"offline: {dead} did not answer when recorded" in out
        assert f"not recorded: index {dead} did not answer" in out
        assert "torch 2.9.1: cpu not checked: " in out


# -- the printed commands, dry-run by real EasyBuild on the installed easyconfigs -------------

def _printed(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    capsys.readouterr()
    assert _generate(tmp_path / "out dir; echo", "--offline", "--print-build-command",
                     *args) == 0
    return [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("  build ", "  submit "))]


@pytest.mark.parametrize(("variant", "arch"), [("cu128", "x86_64"), ("cpu", "aarch64")])
def test_printed_local_command_builds_the_generated_files(
        tmp_path: Path, eb_env: EasyBuildEnv, capsys: pytest.CaptureFixture[str],
        variant: str, arch: str) -> None:
    """Upstream has PyTorch-2.9.1-foss-2025a(-CUDA-12.8.0)-whl.eb and a Triton on gfbf: the
    robot must still take every generated name from the output folder."""
    out = tmp_path / "out dir; echo"
    local = next(line for line in _printed(tmp_path, capsys, "--variant", variant)
                 if "--easystack" in line and f"-{variant}-{arch}" in line)
    result = eb_env.shell(AS_ROOT + local.replace(" && eb ", " && eb --dry-run ", 1))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    planned = re.findall(r"^ \* \[.\] (.+?) \(module: ", result.stdout, re.MULTILINE)
    generated = {p.name for p in out.glob("*.eb")}
    used = {Path(p).name: Path(p).parent for p in planned if Path(p).name in generated}
    stack = (out / f"easystack-foss-2025a-{variant}-{arch}.yaml").read_text()
    assert set(used) == set(re.findall(r"^  - (\S+)$", stack, re.MULTILINE))
    assert all(folder == out for folder in used.values()), used
    assert not [p for p in planned if re.search(r"/(PyTorch|Triton)-[\d.]+-\S+-whl\.eb$", p)
                and Path(p).parent != out]


def test_printed_slurm_command_resolves_to_the_generated_files(
        tmp_path: Path, eb_env: EasyBuildEnv, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out dir; echo"
    slurm = next(line for line in _printed(tmp_path, capsys, "--variant", "cu128")
                 if "--job" in line and "-x86_64" in line)
    assert shlex.split(slurm)[1] == str(out)  # the folder with ';' stays one word
    command = slurm.replace(" --job ", " --dry-run ", 1).split(" 2>&1 | tee ")[0]
    result = eb_env.shell(AS_ROOT + command)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert f" * [ ] {out}/Triton-3.5.1-gfbf-2025a-CUDA-12.8.0-whl.eb" in result.stdout
    assert f" * [ ] {out}/PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb" in result.stdout
