"""torchstack generate --with / --with-file: a site's torch consumers beyond the companions,
resolved against real wheels on 127.0.0.1 (torch 2.14.1 with its CUDA 13 wheels, torchaudio
2.11.1, fbgemm-gpu-cpu 1.9.0, xformers 0.0.35) and a small pure-Python project, classified
before install, written as -whl easyconfigs on the PyTorch module, or reported with the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ebenv import EasyBuildEnv
from support.indexserver import IndexServer
from support.releasewheels import pypi_release
from support.wheelbuild import build_wheel
from support.wheelcache import cache_dir, cache_lock

from torchstack.cli import main
from torchstack.generator import siteprojects

SUFFIX = "foss-2023a-CUDA-13.0.2-whl"


@pytest.fixture(scope="module")
def site_index(cuda_stack: dict[str, Path], real_wheel: object,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    folder = tmp_path_factory.mktemp("site-projects")
    pure = [build_wheel(folder, "torchpure", "2.0", {"torchpure/__init__.py": b""},
                        ("torch>=2.15",)),
            build_wheel(folder, "torchpure", "1.0", {"torchpure/__init__.py": b""},
                        ("torch>=2.13",)),
            # needs another site project and a companion: their modules, not their wheels
            build_wheel(folder, "torchstacked", "0.1", {"torchstacked/__init__.py": b""},
                        ("torch>=2.13", "torchpure>=1", "torchaudio"))]
    real = [real_wheel(key) for key in  # type: ignore[operator]
            ("torchaudio-2.11.1", "torchcodec-0.17.0", "fbgemm_gpu_cpu-1.9.0",
             "xformers-0.0.35")]
    with IndexServer([*cuda_stack.values(), *real, *pure]) as server:
        yield server


@pytest.fixture(scope="module")
def generated(site_index: IndexServer, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[int, str, Path]:
    out = tmp_path_factory.mktemp("generated") / "out"
    listing = out.parent / "projects.txt"
    listing.write_text("# the site's list\nxformers\ntorchstacked\ntorchpure  # pure Python\n")
    capture = out.parent / "stdout.txt"
    import contextlib

    with open(capture, "w") as handle, contextlib.redirect_stdout(handle):
        code = main(["generate", "2.14.1", "-v", "--index", site_index.index_url, "--toolchain",
                     "foss/2023a", "--arch", "x86_64", "--out", str(out),
                     "--with", "torchcodec", "--with", "fbgemm-gpu-cpu", "--with", "torchaudio",
                     "--with-file", str(listing)])
    return code, capture.read_text(), out


class TestSiteProjects:
    def test_written_on_the_pytorch_module(self, generated: tuple[int, str, Path]) -> None:
        code, _, out = generated
        assert code == 0
        for name in ("torchcodec-0.17.0", "torchpure-1.0"):
            text = (out / f"{name}-{SUFFIX}.eb").read_text()
            assert "easyblock = 'PyTorchWheels'" in text
            assert "('PyTorch', '2.14.1', '-CUDA-13.0.2-whl')" in text

    def test_sanity_import_of_its_own_module(self, generated: tuple[int, str, Path]) -> None:
        # torchcodec installs only its own module: no modulename
        _, _, out = generated
        assert "modulename" not in (out / f"torchcodec-0.17.0-{SUFFIX}.eb").read_text()

    def test_release_bound_consumer_is_not_assumed(self, generated: tuple[int, str, Path]
                                                   ) -> None:
        # fbgemm-gpu-cpu registers kernels through the dispatcher and names no torch release;
        # the symbols that would bracket its release lie where range reads do not reach in
        # PyPI's torch 2.14.1 wheel, so it is left out with the evidence, never assumed
        _, stdout, out = generated
        assert not list(out.glob("fbgemm-gpu-cpu-*.eb"))
        assert re.search(r"fbgemm-gpu-cpu: not built: .*registers kernels through libtorch's "
                         r"dispatcher and names no torch release", stdout), stdout

    def test_report_says_each_class(self, generated: tuple[int, str, Path]) -> None:
        _, stdout, _ = generated
        assert re.search(r"generated torchcodec-0\.17\.0-\S+ \(x86_64\): torchcodec 0\.17\.0: "
                         r"stable, torch>=2\.11\.0 \(cu13\)", stdout), stdout
        assert re.search(r"generated torchpure-1\.0-\S+ \(x86_64\): torchpure 1\.0: python, "
                         r"torch>=2\.13",
                         stdout), stdout

    def test_unfit_project_reported_not_written(self, generated: tuple[int, str, Path]) -> None:
        _, stdout, out = generated
        # xformers 0.0.35 has CUDA 12 code: it cannot run on the CUDA 13 torch of this set
        assert re.search(r"xformers: not built: no release among the \d+ newest runs on torch "
                         r"2\.14\.1: .*0\.0\.35 \(on x86_64: xformers 0\.0\.35 needs a cu12 torch, "
                         r"torch 2\.14\.1 is cu13\)", stdout), stdout
        assert not list(out.glob("xformers-*.eb"))

    def test_easystack_in_dependency_order(self, generated: tuple[int, str, Path]) -> None:
        _, _, out = generated
        (stack,) = out.glob("easystack-*-x86_64.yaml")
        text = stack.read_text()
        order = [text.index(f"{n}-") for n in ("Triton", "PyTorch", "torchaudio",
                                                 "torchcodec-0.17.0", "torchpure",
                                                 "torchstacked")]
        assert order == sorted(order)

    def test_site_project_on_the_modules_it_needs(self,
                                                  generated: tuple[int, str, Path]) -> None:
        _, _, out = generated
        text = (out / f"torchstacked-0.1-{SUFFIX}.eb").read_text()
        assert "('torchpure', '1.0', '-CUDA-13.0.2-whl')" in text
        assert "('torchaudio', '2.11.1', '-CUDA-13.0.2-whl')" in text
        assert "('torchpure', '1.0', {" not in text and "('torchaudio', '2.11.1', {" not in text

    def test_companion_named_by_the_site(self, generated: tuple[int, str, Path]) -> None:
        _, stdout, out = generated
        assert "torchaudio: a companion of torch 2.14.1, generated as such" in stdout
        assert len(list(out.glob("torchaudio-*.eb"))) == 1

    def test_bad_project_list(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["generate", "2.14.1", "--with", "torch", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err == "torchstack: error: --with: 'torch' is torch itself\n"

    def test_offline_project_the_catalog_did_not_record(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        # the catalog holds torch and what torch needs: a site project it never recorded is
        # reported as such, not as a project without wheels; the rest of the set is written
        out = tmp_path / "out"
        main(["generate", "2.9.1", "--offline", "--toolchain", "foss/2025a", "--with",
              "xformers", "--out", str(out)])
        stdout = capsys.readouterr().out
        assert re.search(r"\n  left out: xformers: not built: the catalog "
                         r"recorded no answer for xformers \(recorded \d{4}-\d\d-\d\d\); "
                         r"generate online to include it", stdout), stdout
        assert "admits has a wheel" not in stdout
        assert not list(out.glob("xformers-*")) and list(out.glob("PyTorch-2.9.1-*.eb"))

    def test_easybuild_accepts_the_set(self, generated: tuple[int, str, Path],
                                       eb_env: EasyBuildEnv) -> None:
        _, _, out = generated
        files = sorted(str(p) for p in out.glob("*.eb"))
        checked = eb_env.run_eb("--check-contrib", *files, cwd=out)
        assert "All contribution checks PASSed!" in checked.stdout, checked.stdout[-3000:]
        (stack,) = out.glob("easystack-*-x86_64.yaml")
        planned = eb_env.run_eb("--dry-run", f"--robot={out}:", "--easystack", str(stack),
                                cwd=out)
        assert planned.returncode == 0, planned.stdout[-3000:]
        assert f"torchcodec-0.17.0-{SUFFIX}.eb" in planned.stdout


@pytest.fixture(scope="module")
def torchao_aarch64() -> Path:
    """torchao 0.18.0's wheel for aarch64 (pure Python: its C++ kernels are x86_64 only)."""
    dest = cache_dir() / "wheels-aarch64"
    with cache_lock("wheels-aarch64"):
        if not list(dest.glob("torchao-0.18.0-py3-none-any.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--only-binary=:all:", "--platform", "manylinux_2_28_aarch64",
                            "--python-version", "3.13", "--dest", str(dest), "torchao==0.18.0"],
                           check=True)
    return dest / "torchao-0.18.0-py3-none-any.whl"


class TestArchitecturesDiffer:
    def test_torchao_per_architecture(self, tmp_path: Path, real_wheel: Any,
                                      torchao_aarch64: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
        # torch 2.9.1 (CUDA 12.8, both architectures): torchao's x86_64 wheel uses C shims of
        # torch 2.11 with CUDA 13 code and cannot run on it; its aarch64 wheel is pure Python
        release = pypi_release(tmp_path / "release")
        with IndexServer([*release, real_wheel("torchao-0.18.0"), torchao_aarch64]) as server:
            code = main(["generate", "2.9.1", "--index", server.index_url, "--toolchain",
                         "foss/2025a", "--variant", "cu128", "--out", str(tmp_path / "out"),
                         "--with", "torchao"])
        stdout = capsys.readouterr().out
        assert code == 0
        # what the x86_64 wheel shows holds for the release: its pure-Python aarch64 wheel is
        # not taken as "does not depend on torch"
        assert "torchao: not built: no release among the 1 newest runs on torch 2.9.1: 0.18.0 " \
            "(on x86_64: torchao 0.18.0 uses the stable ABI of torch 2.11.0, newer than torch " \
            "2.9.1; torchao 0.18.0 needs a cu13 torch, torch 2.9.1 is cu12)" in stdout, stdout
        assert not list((tmp_path / "out").glob("torchao-*.eb"))


class TestOwnModule:
    @pytest.mark.parametrize("project, modules, expected", [
        pytest.param("fbgemm-gpu-cpu", ("fbgemm_gpu", "list_versions"), "fbgemm_gpu",
                     id="prefix-beside-another"),
        pytest.param("torchcodec", ("torchcodec",), None, id="only-its-own"),
        pytest.param("torch-harmonics", ("attention_helpers", "disco_helpers",
                                         "torch_harmonics"), "torch_harmonics", id="helpers"),
        pytest.param("oddname", ("something",), None, id="none-matches"),
    ])
    def test_choice(self, project: str, modules: tuple[str, ...], expected: str | None) -> None:
        assert siteprojects.own_module(project, modules) == expected
