"""torchstack generate against real HTTP indexes on 127.0.0.1, checked by real EasyBuild.

Two indexes serve a release shaped like torch 2.9.1: a PyPI-like one (the CUDA 12.8 default
build, companions, triton, nvidia and pure wheels) and a cpu variant index (`+cpu` builds).
A third serves this machine's real wheels (torch 2.13.0+cpu, torch 2.14.1 with its CUDA 13
stack, torchvision 0.28.0 and 0.29.1). Every generated easyconfig must pass
`eb --check-contrib` and resolve with `eb --dry-run --robot` against upstream's easyconfigs.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from support.ebenv import EasyBuildEnv
from support.indexserver import IndexServer
from support.releasewheels import CU12_PINS, release_indexes

from torchstack.cli import main
from torchstack.generator import toolchains

TOOLCHAINS = ("foss/2025a", "foss/2024a")
WHL_SET = [
    "PyTorch-2.9.1-{tc}-whl.eb", "torchvision-0.24.1-{tc}-whl.eb", "torchaudio-2.9.1-{tc}-whl.eb",
    "Triton-3.5.1-{gfbf}-CUDA-12.8.0-whl.eb", "PyTorch-2.9.1-{tc}-CUDA-12.8.0-whl.eb",
    "torchvision-0.24.1-{tc}-CUDA-12.8.0-whl.eb", "torchaudio-2.9.1-{tc}-CUDA-12.8.0-whl.eb",
]


@pytest.fixture(scope="session")
def synthetic_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    return release_indexes(tmp_path_factory.mktemp("release-2.9.1"))


@pytest.fixture
def indexes(synthetic_wheels: dict[str, list[Path]]) -> Iterator[tuple[IndexServer, IndexServer]]:
    """Fresh servers per test: their hit logs and faults belong to that test alone."""
    with IndexServer(synthetic_wheels["pypi"]) as pypi, \
            IndexServer(synthetic_wheels["cpu"]) as cpu:
        yield pypi, cpu


def _generate(tmp_path: Path, *args: str, out: str = "out") -> tuple[int, Path]:
    folder = tmp_path / out
    return main(["generate", "-v", *args, "--out", str(folder)]), folder


def _urls(servers: tuple[IndexServer, ...]) -> list[str]:
    return [arg for server in servers for arg in ("--index", server.index_url)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class TestSyntheticRelease:
    def test_whole_set_for_two_toolchains(self, tmp_path: Path, indexes: tuple[IndexServer, ...],
                                          capsys: pytest.CaptureFixture[str]) -> None:
        code, out = _generate(tmp_path, "2.9.1", *_urls(indexes),
                              *(a for tc in TOOLCHAINS for a in ("--toolchain", tc)))
        assert code == 0
        expected = {name.format(tc=tc.replace("/", "-"), gfbf=tc.replace("foss/", "gfbf-"))
                    for tc in TOOLCHAINS for name in WHL_SET}  # Triton on gfbf, as upstream
        easyconfigs = {p.name for p in out.glob("*.eb")}
        assert easyconfigs == expected
        report = capsys.readouterr().out
        assert "generated PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb (aarch64, x86_64): " \
               "provides torch-2.9.1-cxx11-cu12" in report
        assert "provides torch-2.9.1-cxx11-cpu" in report

    def test_python_and_modules_of_each_toolchain(self, tmp_path: Path,
                                                  indexes: tuple[IndexServer, ...]) -> None:
        _, out = _generate(tmp_path, "2.9.1", *_urls(indexes), "--toolchain", "foss/2024a",
                           "--toolchain", "foss/2025a")
        text_2025a = (out / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        text_2024a = (out / "PyTorch-2.9.1-foss-2024a-CUDA-12.8.0-whl.eb").read_text()
        assert "('Python', '3.13.1')" in text_2025a and "('SciPy-bundle', '2025.06')" in text_2025a
        assert "('Python', '3.12.3')" in text_2024a
        assert "('Triton', '3.5.1', '-CUDA-12.8.0-whl')" in text_2025a
        assert "torchstack_abi_tag = 'torch-2.9.1-cxx11-cu12'" in text_2025a
        vision = (out / "torchvision-0.24.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        assert "('PyTorch', '2.9.1', '-CUDA-12.8.0-whl')" in vision
        assert "('Pillow', " in vision  # pillow!=8.3.*,>=5.3.0 met by the toolchain's module

    def test_checksums_from_the_index_for_every_arch(
            self, tmp_path: Path, indexes: tuple[IndexServer, ...],
            synthetic_wheels: dict[str, list[Path]]) -> None:
        _, out = _generate(tmp_path, "2.9.1", *_urls(indexes), "--variant", "cu128",
                           "--cuda-libs", "wheels")
        text = (out / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        torch = [w for w in synthetic_wheels["pypi"] if w.name.startswith("torch-2.9.1-cp313")]
        assert len(torch) == 2
        for wheel in torch:
            assert f"'{wheel.name}':\n                '{_sha256(wheel)}'," in text
        assert "}[ARCH]]" in text
        for project, version in CU12_PINS.items():  # nvidia wheels as extensions
            assert f"('{project}', '{version}', {{" in text

    def test_companions_chosen_by_their_requires_dist(
            self, tmp_path: Path, indexes: tuple[IndexServer, ...]) -> None:
        # torchvision 0.25.0 pins torch 2.10.0 and 0.24.0 pins 2.9.0: 0.24.1 pins 2.9.1
        _, out = _generate(tmp_path, "2.9.1", *_urls(indexes))
        assert (out / "torchvision-0.24.1-foss-2025a-CUDA-12.8.0-whl.eb").is_file()
        assert not list(out.glob("torchvision-0.2[35]*"))

    def test_cuda_libs_modules_depends_on_cuda_modules(
            self, tmp_path: Path, indexes: tuple[IndexServer, ...]) -> None:
        _, out = _generate(tmp_path, "2.9.1", *_urls(indexes), "--variant", "cu128",
                           "--cuda-libs", "modules")
        text = (out / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").read_text()
        assert "cuda_libs = 'modules'" in text
        assert "('CUDA', '12.8.0', '', SYSTEM)" in text
        assert "('cuDNN', '9.10.1.4', '-CUDA-%(cudaver)s', SYSTEM)" in text
        assert re.search(r"\('NCCL', '[\d.]+', '-CUDA-%\(cudaver\)s'\)", text)
        assert "nvidia" not in text

    def test_reads_metadata_once_per_version_and_downloads_no_wheel(
            self, tmp_path: Path, indexes: tuple[IndexServer, ...]) -> None:
        _generate(tmp_path, "2.9.1", *_urls(indexes),
                  *(a for tc in TOOLCHAINS for a in ("--toolchain", tc)))
        for server in indexes:
            metadata = [h.path for h in server.hits if h.path.endswith(".metadata")]
            versions = [re.sub(r"-(cp\d+|py3).*", "", p.rsplit("/", 1)[-1]) for p in metadata]
            assert len(versions) == len(set(versions)), versions
            # companions are predicted like every consumer: their ELF tables by range reads
            wheels = [h for h in server.hits if h.path.endswith(".whl")]
            assert all(h.range and h.status == 206 for h in wheels), wheels

    def test_range_reads_when_metadata_files_are_missing(
            self, tmp_path: Path, synthetic_wheels: dict[str, list[Path]]) -> None:
        with IndexServer() as pypi, IndexServer() as cpu:
            for server, key in ((pypi, "pypi"), (cpu, "cpu")):
                for wheel in synthetic_wheels[key]:
                    server.add_wheel(wheel, metadata="missing")
            code, out = _generate(tmp_path, "2.9.1", *_urls((pypi, cpu)))
            assert code == 0
            ranged = [h for s in (pypi, cpu) for h in s.hits if h.path.endswith(".whl")]
            assert ranged and all(h.range for h in ranged)
        assert (out / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb").is_file()

    def test_one_architecture(self, tmp_path: Path, indexes: tuple[IndexServer, ...]) -> None:
        _, out = _generate(tmp_path, "2.9.1", *_urls(indexes), "--arch", "x86_64",
                           "--variant", "cpu")
        text = (out / "PyTorch-2.9.1-foss-2025a-whl.eb").read_text()
        assert "aarch64" not in text and "[ARCH]" not in text
        assert sorted(p.name for p in out.glob("*.yaml")) == [
            "easystack-foss-2025a-cpu-x86_64.yaml"]

    def test_easystacks_in_dependency_order(self, tmp_path: Path,
                                            indexes: tuple[IndexServer, ...]) -> None:
        _, out = _generate(tmp_path, "2.9.1", *_urls(indexes))
        stack = (out / "easystack-foss-2025a-cu128-aarch64.yaml").read_text()
        names = re.findall(r"^  - (\S+)$", stack, re.MULTILINE)
        assert names == ["Triton-3.5.1-gfbf-2025a-CUDA-12.8.0-whl.eb",
                         "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb",
                         "torchvision-0.24.1-foss-2025a-CUDA-12.8.0-whl.eb",
                         "torchaudio-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb"]
        assert "--include-easyblocks" in stack


class TestNoWheelFor:
    def test_architecture_reported_before_any_build(
            self, tmp_path: Path, synthetic_wheels: dict[str, list[Path]],
            capsys: pytest.CaptureFixture[str]) -> None:
        x86_only = [w for w in synthetic_wheels["cpu"] if "aarch64" not in w.name]
        with IndexServer(x86_only) as cpu:
            code, out = _generate(tmp_path, "2.9.1", "--index", cpu.index_url)
        assert code == 0
        assert "torch 2.9.1: no wheel for Python 3.13 on aarch64" in capsys.readouterr().out
        assert "aarch64" not in (out / "PyTorch-2.9.1-foss-2025a-whl.eb").read_text()

    def test_python_of_toolchain(self, tmp_path: Path, synthetic_wheels: dict[str, list[Path]],
                                 capsys: pytest.CaptureFixture[str]) -> None:
        cp312 = [w for w in synthetic_wheels["cpu"] if "cp312" in w.name]
        with IndexServer(cp312) as cpu:
            code, _ = _generate(tmp_path, "2.9.1", "--index", cpu.index_url,
                                "--toolchain", "foss/2025a")
        assert code == 2
        assert "no wheel for Python 3.13 on x86_64" in capsys.readouterr().err


class TestErrors:
    def test_unknown_release(self, tmp_path: Path, indexes: tuple[IndexServer, ...],
                             capsys: pytest.CaptureFixture[str]) -> None:
        code, out = _generate(tmp_path, "2.99.0", *_urls(indexes))
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("torchstack: error: nothing generated")
        assert "2.99.0" in err and not out.exists()

    def test_invalid_release(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code, _ = _generate(tmp_path, "2.9.1'\nimport os", "--index", str(tmp_path))
        assert code == 2
        assert "not a valid PEP 440 version" in capsys.readouterr().err

    @pytest.mark.parametrize("filename", [
        "torch-2.9.1'+cpu-cp313-cp313-manylinux_2_28_x86_64.whl",   # quote in the version
        "torch-2.9.1+cpu-cp313-cp313-manylinux_2_28_x86_64'\n.whl",  # quote, newline in tags
        'torch"x-2.9.1-cp313-cp313-manylinux_2_28_x86_64.whl',       # quote in the name
    ], ids=["version", "tags", "name"])
    def test_hostile_index_entries_never_reach_an_easyconfig(
            self, tmp_path: Path, synthetic_wheels: dict[str, list[Path]], filename: str,
            capsys: pytest.CaptureFixture[str]) -> None:
        good = [w for w in synthetic_wheels["cpu"] if "x86_64" in w.name]
        with IndexServer(good) as cpu:
            torch = next(w for w in good if w.name.startswith("torch-"))
            cpu.add("torch", filename, torch.read_bytes())
            code, out = _generate(tmp_path, "2.9.1", "--index", cpu.index_url)
        err = capsys.readouterr().err
        if code == 2:  # refused: one line, nothing written
            assert err.startswith("torchstack: error: ") and err.count("\n") == 1
            assert not out.exists()
            return
        # or passed over as fitting no platform: the easyconfigs hold only the good wheels
        assert code == 0
        for easyconfig in out.glob("*.eb"):
            text = easyconfig.read_text()
            ast.parse(text)
            assert filename not in text and quote(filename) not in text

    def test_missing_hash_is_an_error_unless_download_allowed(
            self, tmp_path: Path, synthetic_wheels: dict[str, list[Path]],
            capsys: pytest.CaptureFixture[str]) -> None:
        with IndexServer(synthetic_wheels["cpu"]) as cpu:
            cpu.formats, cpu.html_hashes = ("html",), False
            code, out = _generate(tmp_path, "2.9.1", "--index", cpu.index_url)
            assert code == 2 and "--allow-download-hash" in capsys.readouterr().err
            assert not out.exists()
            code, out = _generate(tmp_path, "2.9.1", "--index", cpu.index_url,
                                  "--allow-download-hash")
            assert code == 0
        report = capsys.readouterr().out
        assert "downloaded torch-2.9.1+cpu-cp313-cp313-manylinux_2_28_x86_64.whl to hash" \
               in report
        torch = next(w for w in synthetic_wheels["cpu"]
                     if w.name == "torch-2.9.1+cpu-cp313-cp313-manylinux_2_28_x86_64.whl")
        assert _sha256(torch) in (out / "PyTorch-2.9.1-foss-2025a-whl.eb").read_text()

    def test_never_overwrites_without_force(self, tmp_path: Path,
                                            indexes: tuple[IndexServer, ...],
                                            capsys: pytest.CaptureFixture[str]) -> None:
        assert _generate(tmp_path, "2.9.1", *_urls(indexes), "--variant", "cpu")[0] == 0
        target = tmp_path / "out" / "PyTorch-2.9.1-foss-2025a-whl.eb"
        target.write_text("# edited by the site\n")
        code, _ = _generate(tmp_path, "2.9.1", *_urls(indexes), "--variant", "cpu")
        assert code == 2 and "use --force" in capsys.readouterr().err
        assert target.read_text() == "# edited by the site\n"
        assert _generate(tmp_path, "2.9.1", *_urls(indexes), "--variant", "cpu", "--force")[0] == 0
        assert target.read_text().startswith("easyblock = 'PyTorchWheels'")

    def test_server_errors_then_success(self, tmp_path: Path,
                                        indexes: tuple[IndexServer, ...]) -> None:
        cpu = indexes[1]
        cpu.fail(cpu.page_path("torch"), times=2, status=503)
        code, out = _generate(tmp_path, "2.9.1", *_urls(indexes), "--variant", "cpu")
        assert code == 0 and (out / "PyTorch-2.9.1-foss-2025a-whl.eb").is_file()
        assert [h.status for h in cpu.hits_of(cpu.page_path("torch"))][:3] == [503, 503, 200]


class TestOffline:
    def test_catalog_replays_the_index(self, tmp_path: Path, indexes: tuple[IndexServer, ...],
                                       capsys: pytest.CaptureFixture[str]) -> None:
        catalog = tmp_path / "catalog"
        assert main(["catalog", "refresh", "--release", "2.9.1", *_urls(indexes),
                     "--dir", str(catalog), "--toolchain", "foss/2025a"]) == 0
        recorded = (catalog / "torch-2.9.1.json").read_text()
        assert indexes[0].index_url in recorded and '"recorded"' in recorded
        _, online = _generate(tmp_path, "2.9.1", *_urls(indexes), out="online")
        code, offline = _generate(tmp_path, "2.9.1", "--offline", "--catalog", str(catalog),
                                  out="offline")
        assert code == 0
        assert {p.name: p.read_text() for p in online.iterdir()} == \
               {p.name: p.read_text() for p in offline.iterdir()}
        assert "offline: answers of " in capsys.readouterr().out

    def test_release_not_in_catalog(self, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
        code, _ = _generate(tmp_path, "1.0.0", "--offline")
        assert code == 2 and "the catalog has no torch '1.0.0'" in capsys.readouterr().err

    def test_embedded_catalog(self, tmp_path: Path) -> None:
        """The shipped catalog: the README's main job works without any network."""
        from torchstack.index import catalog

        releases = catalog.releases()
        assert releases, "no release in the embedded catalog"
        code, out = _generate(tmp_path, releases[0], "--offline")
        assert code == 0 and list(out.glob(f"PyTorch-{releases[0]}-foss-2025a*-whl.eb"))


# -- EasyBuild's own checks ------------------------------------------------------------------

def _eb(eb_env: EasyBuildEnv, folder: Path, *args: str) -> str:
    result = eb_env.run_eb(*args, cwd=folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def generated_set(tmp_path_factory: pytest.TempPathFactory,
                  synthetic_wheels: dict[str, list[Path]]) -> Path:
    tmp = tmp_path_factory.mktemp("generated")
    with IndexServer(synthetic_wheels["pypi"]) as pypi, \
            IndexServer(synthetic_wheels["cpu"]) as cpu:
        code, _ = _generate(tmp, "2.9.1", *_urls((pypi, cpu)),
                            *(a for tc in TOOLCHAINS for a in ("--toolchain", tc)))
        assert code == 0
        code, _ = _generate(tmp, "2.9.1", *_urls((pypi, cpu)), "--cuda-libs", "modules",
                            "--variant", "cu128", out="modules")
        assert code == 0
    return tmp


class TestEasyBuildChecks:
    def test_check_contrib(self, eb_env: EasyBuildEnv, generated_set: Path) -> None:
        files = sorted(str(p) for p in generated_set.glob("*/*.eb"))
        assert len(files) == 2 * len(WHL_SET) + 4
        output = _eb(eb_env, generated_set, "--check-contrib", *files)
        assert "All contribution checks PASSed!" in output

    @pytest.mark.parametrize("stack", [
        "out/easystack-foss-2025a-cu128-x86_64.yaml",
        "out/easystack-foss-2024a-cpu-aarch64.yaml",
        "modules/easystack-foss-2025a-cu128-x86_64.yaml",
    ])
    def test_dry_run_robot_resolves(self, eb_env: EasyBuildEnv, generated_set: Path,
                                    stack: str) -> None:
        folder = generated_set / Path(stack).parent
        output = _eb(eb_env, folder, "--dry-run", f"--robot={folder}:", "--easystack",
                     str(generated_set / stack))
        assert re.search(r"\* \[ \] \S+/Python-3\.1[23]\.\d+-GCCcore-[\d.]+\.eb", output)
        assert f"{folder}/PyTorch-2.9.1-" in output



@pytest.mark.parametrize(("args", "message"), [
    (["--glibc", "two"], "--glibc 'two' is not of the form X.Y"),
    (["--toolchain", "foss/1999z"], "foss/1999z"),
    (["--offline", "--index", "https://example.org/simple/"], "takes no --index"),
    (["--index", "http://example.org/simple/"], "refused: remote indexes must use https://"),
    (["--stage", "binary"], "invalid choice: 'binary'"),
], ids=["glibc", "toolchain", "offline-index", "plain-http", "stage"])
def test_bad_usage_is_one_line(tmp_path: Path, args: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code, _ = _generate(tmp_path, "2.9.1", *args)
    except SystemExit as exited:  # argparse's own usage errors exit by themselves
        code = int(exited.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("torchstack: error: ") and err.count("\n") == 1
    assert message in err and not (tmp_path / "out").exists()


class TestSourceStage:
    def test_derived_from_upstream(self, tmp_path: Path) -> None:
        code, out = _generate(tmp_path, "2.9.1", "--offline", "--stage", "source",
                              "--toolchain", "foss/2025a", "--toolchain", "foss/2024a")
        assert code == 0
        names = sorted(p.name for p in out.glob("*.eb"))
        assert names == ["PyTorch-2.9.1-foss-2024a.eb", "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0.eb",
                         "PyTorch-2.9.1-foss-2025a.eb"]
        text = (out / "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0.eb").read_text()
        assert "easyblock = 'PyTorchSource'" in text
        assert "patches = [" in text  # upstream's build, unchanged

    def test_no_upstream_source_easyconfig(self, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
        code, out = _generate(tmp_path, "2.9.1", "--offline", "--stage", "source",
                              "--toolchain", "foss/2023a")
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("torchstack: error: nothing generated")
        assert "the robot path has no PyTorch-2.9.1-foss-2023a.eb to derive" in err
        assert not out.exists()


def _ignored_errors(output: str) -> list[str]:
    """eb -x's ignored errors, with temporary paths and the module name left out."""
    lines = re.findall(r"^!!! WARNING: ignoring error (.*)$", output, re.MULTILINE)
    return sorted(re.sub(r"/tmp/\S+|PyTorch/\S+", "X", line) for line in lines)


@pytest.mark.parametrize("name", ["PyTorch-2.9.1-foss-2025a-CUDA-12.8.0.eb",
                                  "PyTorch-2.9.1-foss-2025a.eb", "PyTorch-2.9.1-foss-2024a.eb"])
def test_source_easyconfig_extended_dry_run(tmp_path: Path, eb_env: EasyBuildEnv,
                                            name: str) -> None:
    """eb -x of the derived easyconfig runs PyTorchSource through every step, with no error
    that upstream's own easyconfig does not show as well in a dry run."""
    code, out = _generate(tmp_path, "2.9.1", "--offline", "--stage", "source",
                          "--toolchain", "foss/2025a", "--toolchain", "foss/2024a")
    assert code == 0
    ours = eb_env.run_eb("-x", str(out / name), cwd=out)
    assert "*** DRY RUN using 'PyTorchSource' easyblock" in ours.stdout
    assert f"* [SUCCESS] {name[:-3].replace('-', '/', 1)}" in ours.stdout, ours.stdout[-3000:]
    upstream_dir = Path(toolchains.default_robot_paths()[0])
    upstream = eb_env.run_eb("-x", str(next(upstream_dir.glob(f"p/PyTorch/{name}"))), cwd=out)
    assert _ignored_errors(ours.stdout) == _ignored_errors(upstream.stdout)
    # eb 5.4 -x ends with "Failed to remove log file(s)" for upstream's easyconfig too
    assert ours.returncode == upstream.returncode


def test_unmet_requirement_writes_nothing(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """foss/2023a's modules have no sympy>=1.13.3 and the catalog recorded no sympy wheel:
    such a PyTorch module would fail `pip check` at install, so it is not written at all."""
    code, out = _generate(tmp_path, "2.9.1", "--offline", "--toolchain", "foss/2023a")
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("torchstack: error: nothing generated: ")
    assert "sympy>=1.13.3 (wanted by the set): no module of the toolchain provides it" in err
    assert not out.exists()
