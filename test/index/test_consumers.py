"""torchstack.index.consumers and `torchstack classify`: a site's torch consumers resolved for a
torch release per target and classified before install, against real wheels served on
127.0.0.1 (and small synthetic releases beside them for the cases no real wheel shows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from indexserver import IndexServer
from packaging.requirements import Requirement
from packaging.version import Version
from wheelbuild import build_wheel

from torchstack.cli import main
from torchstack.index import consumers
from torchstack.index.simple import SimpleIndex

X86, ARM = consumers.Target((3, 11), "x86_64"), consumers.Target((3, 11), "aarch64")


@pytest.fixture(scope="module")
def server(real_wheel: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """torchaudio 2.11.1 and fbgemm-gpu-cpu 1.9.0 (real, x86_64 only), and a pure project
    whose newest release wants a newer torch than 2.14.1."""
    folder = tmp_path_factory.mktemp("consumers")
    pure = [build_wheel(folder, "torchpure", "2.0", {"torchpure/__init__.py": b""},
                        ("torch>=2.15",)),
            build_wheel(folder, "torchpure", "1.0", {"torchpure/__init__.py": b""},
                        ("torch>=2.13",))]
    real = [real_wheel("torchaudio-2.11.1"), real_wheel("fbgemm_gpu_cpu-1.9.0")]
    with IndexServer([*real, *pure]) as running:
        yield running


def resolve(server: IndexServer, spec: str, torch: str, target: consumers.Target) -> str:
    index = SimpleIndex(server.index_url)
    return consumers.resolve(index, Requirement(spec), Version(torch), target).line(
        Version(torch))


class TestResolve:
    @pytest.mark.parametrize("spec, torch, target, line", [
        pytest.param("torchaudio", "2.14.1", X86,
                     "torchaudio 2.11.1: stable, torch>=2.13.0 (cu13) [Requires-Dist "
                     "torch>=2.11; its C shims need torch>=2.13.0] (Python 3.11 on x86_64)",
                     id="stable"),
        # no torch release in its metadata: taken as built on the release resolved for
        pytest.param("fbgemm-gpu-cpu", "2.14.1", X86,
                     "fbgemm_gpu-cpu 1.9.0: cxx, needs torch-2.14.1-cxx11-cpu exactly (no torch "
                     "release in its metadata: taken as built on 2.14.1) (Python 3.11 on "
                     "x86_64)", id="cxx"),
        pytest.param("torchaudio", "2.14.1", ARM,
                     "torchaudio (Python 3.11 on aarch64): not built: no release fits: 2.11.1 "
                     "has no wheel for Python 3.11 on aarch64", id="no-wheel-for-arch"),
        pytest.param("torchaudio", "2.10.0", X86,
                     "torchaudio (Python 3.11 on x86_64): not built: no release fits: 2.11.1 "
                     "requires torch>=2.11, not 2.10.0", id="refuses-torch"),
        # the newest release wants torch 2.15: the one before it is taken
        pytest.param("torchpure", "2.14.1", ARM,
                     "torchpure 1.0: python, torch>=2.13 (Python 3.11 on aarch64)",
                     id="older-release-fits"),
        pytest.param("torchpure<1", "2.14.1", X86,
                     "torchpure (Python 3.11 on x86_64): not built: no wheel of a release "
                     "that 'torchpure<1' admits", id="spec-admits-none"),
        pytest.param("nosuchproject", "2.14.1", X86,
                     "nosuchproject (Python 3.11 on x86_64): not built: ", id="not-listed"),
    ])
    def test_line(self, server: IndexServer, spec: str, torch: str,
                  target: consumers.Target, line: str) -> None:
        assert resolve(server, spec, torch, target).startswith(line)


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
    def test_report_and_exit(self, server: IndexServer, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
        listing = tmp_path / "projects.txt"
        listing.write_text("fbgemm-gpu-cpu\n")
        code = main(["classify", "2.14.1", "--with", "torchaudio", "--with-file", str(listing),
                     "--index", server.index_url, "--python", "3.11"])
        out = capsys.readouterr().out.splitlines()
        assert code == 1  # a project without a wheel for aarch64
        assert len(out) == 4
        assert out[0].startswith("torchaudio 2.11.1: stable, torch>=2.13.0 (cu13)")
        assert out[1].startswith("torchaudio (Python 3.11 on aarch64): not built:")
        assert out[2].startswith("fbgemm_gpu-cpu 1.9.0: cxx, needs torch-2.14.1-cxx11-cpu")

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
