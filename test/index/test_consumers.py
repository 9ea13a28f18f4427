"""torchstack.index.consumers and `torchstack classify`: a site's torch consumers resolved for a
torch release per variant and classified before install, against real wheels served on
127.0.0.1 (and small synthetic releases beside them for the cases no real wheel shows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.indexserver import IndexServer
from support.wheelbuild import build_wheel

from torchstack.cli import main
from torchstack.index import consumers


@pytest.fixture(scope="module")
def server(real_wheel: Any, cuda_stack: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Any:
    """torch 2.14.1 (PyPI's CUDA 13 build) and 2.13.0+cpu, torchaudio 2.11.1 and
    fbgemm-gpu-cpu 1.9.0 (real, x86_64 only), and a pure project whose newest release wants a
    newer torch than 2.14.1."""
    folder = tmp_path_factory.mktemp("consumers")
    pure = [build_wheel(folder, "torchpure", "2.0", {"torchpure/__init__.py": b""},
                        ("torch>=2.15",)),
            build_wheel(folder, "torchpure", "1.0", {"torchpure/__init__.py": b""},
                        ("torch>=2.13",))]
    real = [cuda_stack["torch"], real_wheel("torch-2.13.0"), real_wheel("torchaudio-2.11.1"),
            real_wheel("fbgemm_gpu_cpu-1.9.0")]
    with IndexServer([*real, *pure]) as running:
        yield running


def classify(server: IndexServer, capsys: pytest.CaptureFixture[str], release: str,
             *argv: str) -> tuple[int, list[str]]:
    code = main(["classify", release, *argv, "--index", server.index_url, "--python", "3.11"])
    return code, capsys.readouterr().out.splitlines()


class TestClassify:
    """classify reports what generate --with resolves, per variant of the release."""

    @pytest.mark.parametrize("spec, release, expected", [
        pytest.param("torchaudio", "2.14.1",
                     ["torchaudio 2.11.1: stable, torch>=2.13.0 (cu13) [Requires-Dist "
                      "torch>=2.11; its C shims need torch>=2.13.0] (cu130, Python 3.11)"],
                     id="stable"),
        # its CUDA 13 code cannot run on the CPU torch
        pytest.param("torchaudio", "2.13.0",
                     ["torchaudio: not built: no release among the 1 newest runs on torch "
                      "2.13.0+cpu: 2.11.1 (on x86_64: torchaudio 2.11.1 links libtorch_cuda.so "
                      "(cu13), torch 2.13.0+cpu is CPU-only) (cpu, Python 3.11)"],
                     id="cuda-on-cpu"),
        # the newest release wants torch 2.15: the one before it is taken, and said so
        pytest.param("torchpure", "2.14.1",
                     ["torchpure 1.0: python, torch>=2.13 (cu130, Python 3.11)",
                      "torchpure: 1.0 taken; newer releases passed over: 2.0 (requires "
                      "torch>=2.15) (cu130, Python 3.11)"], id="walks-back"),
        pytest.param("torchpure<1", "2.14.1",
                     ["torchpure: not built: no release that 'torchpure<1' admits has a wheel "
                      "for Python 3.11 on x86_64 (cu130, Python 3.11)"], id="spec-admits-none"),
    ])
    def test_lines(self, server: IndexServer, capsys: pytest.CaptureFixture[str], spec: str,
                   release: str, expected: list[str]) -> None:
        code, out = classify(server, capsys, release, "--with", spec)
        assert out == expected
        assert code == (0 if len(expected) and "not built" not in " ".join(expected) else 1)

    def test_walk_back_bound(self, server: IndexServer,
                             capsys: pytest.CaptureFixture[str]) -> None:
        code, out = classify(server, capsys, "2.14.1", "--with", "torchpure", "--walk-back", "1")
        assert code == 1
        assert out == ["torchpure: not built: no release among the 1 newest (of 2; raise "
                       "--walk-back to try older ones) runs on torch 2.14.1: 2.0 (requires "
                       "torch>=2.15) (cu130, Python 3.11)"]

    def test_release_bound_consumer_is_never_assumed(
            self, server: IndexServer, capsys: pytest.CaptureFixture[str]) -> None:
        # fbgemm-gpu-cpu registers kernels through the dispatcher and names no torch release:
        # 2.13.0 lacks two of its symbols, and 2.14.1's tables cannot be read by ranges, so
        # nothing is picked (it runs on 2.14.1 only; see test_real_wheels)
        code, out = classify(server, capsys, "2.14.1", "--with", "fbgemm-gpu-cpu")
        assert code == 1 and len(out) == 1
        assert out[0].startswith("fbgemm-gpu-cpu: not built: no release among the 1 newest runs "
                                 "on torch 2.14.1: 1.9.0 (on x86_64: registers kernels through "
                                 "libtorch's dispatcher and names no torch release; no torch "
                                 "release is known to export its 298 libtorch symbols (2 of "
                                 "298 libtorch symbols missing in torch 2.13.0+cpu, e.g. "
                                 "torch::autograd::_wrap_outputs(")
        assert "the symbol tables of torch 2.14.1 could not be read by ranges" in out[0]


class TestProjectList:
    def test_entries_and_file(self, tmp_path: Path) -> None:
        listing = tmp_path / "projects.txt"
        listing.write_text("# the site's consumers\ntorchaudio>=2.9  # audio\n\nxformers\n")
        found = consumers.parse_projects(["torchao<0.19"], [listing])
        assert [str(r) for r in found] == ["torchao<0.19", "torchaudio>=2.9", "xformers"]

    def test_every_problem_at_once(self, tmp_path: Path) -> None:
        listing = tmp_path / "projects.txt"
        listing.write_text("torchaudio\nnot a requirement!\ntorch\n")
        with pytest.raises(consumers.ProjectListError,
                           match=r"missing.txt' cannot be read.*projects.txt:1: 'torchaudio' "
                                 r"is listed twice.*projects.txt:2: 'not a requirement!' is not"
                                 r".*projects.txt:3: 'torch' is torch itself"):
            consumers.parse_projects(["TorchAudio"], [listing, tmp_path / "missing.txt"])


class TestCli:
    @pytest.mark.parametrize("argv, message", [
        pytest.param(["classify", "2.14.1"], "no project named", id="no-project"),
        pytest.param(["classify", "2.14.1", "--with", "x y z"], "is not a requirement",
                     id="bad-entry"),
        pytest.param(["classify", "two", "--with", "xformers"], "Invalid version",
                     id="bad-release"),
        pytest.param(["classify", "2.14.1", "--with", "xformers", "--python", "3"],
                     "is not X.Y", id="bad-python"),
    ])
    def test_bad_input(self, argv: list[str], message: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("torchstack: error: ") and message in err
        assert err.count("\n") == 1
