"""torchstack.generator.toolchains: toolchains read by EasyBuild's parser from a robot path.

Two robot paths: the installed easybuild-easyconfigs (the real thing, several toolchains) and
a small one written here (`robot`): toolchain gfbf/2099a -> GCC/99.1.0 -> GCCcore/99.1.0 ->
system, plus a few packages chosen to exercise one rule each.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from support.easyconfigtext import SYSTEM, easyconfig_text

from torchstack.errors import TorchstackError
from torchstack.generator.toolchains import (
    Dependency,
    Toolchain,
    ToolchainError,
    default_robot_paths,
    easyblock_of,
    load_toolchain,
    provided_packages,
    source_easyconfig,
)

REPO = Path(__file__).resolve().parents[2]
GFBF = ("gfbf", "2099a")
GCC = ("GCC", "99.1.0")
GCCCORE = ("GCCcore", "99.1.0")
SYSTEM_DICT = {"name": "system", "version": "system"}  # SYSTEM in an easyconfig


def filename(name: str, version: str, toolchain: tuple[str, str] = SYSTEM,
             versionsuffix: str = "") -> str:
    tc = "" if toolchain == SYSTEM else f"-{toolchain[0]}-{toolchain[1]}"
    return f"{name}-{version}{tc}{versionsuffix}.eb"


def write(root: Path, text: str, name: str, version: str, toolchain: tuple[str, str] = SYSTEM,
          versionsuffix: str = "", *, flat: bool = False) -> Path:
    """Write an easyconfig where EasyBuild's robot looks: <root>/<letter>/<name>/ or <root>/."""
    folder = root if flat else root / name[0].lower() / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename(name, version, toolchain, versionsuffix)
    path.write_text(text)
    return path


def package(root: Path, name: str, version: str, toolchain: tuple[str, str] = SYSTEM,
            versionsuffix: str = "", body: str = "", flat: bool = False,
            easyblock: str | None = "ConfigureMake") -> Path:
    # a templated suffix ('-CUDA-%(cudaver)s') is written as such; the file name spells it out
    spelled = versionsuffix.replace("%(cudaver)s", _cudaver(body))
    text = easyconfig_text(name, version, toolchain, versionsuffix=versionsuffix, body=body,
                           easyblock=easyblock)
    return write(root, text, name, version, toolchain, spelled, flat=flat)


def _cudaver(body: str) -> str:
    marker = "('CUDA', '"
    return body[body.index(marker) + len(marker):].split("'")[0] if marker in body else ""


def write_toolchains(root: Path) -> None:
    """gfbf/2099a, GCC/99.1.0, GCCcore/99.1.0 and GCCcore/97.1.0 (which has no Python)."""
    write(root, easyconfig_text("gfbf", "2099a", easyblock="Toolchain", body="""\
        dependencies = [
            ('GCC', '99.1.0'),
            ('FlexiBLAS', '3.4.5', '', ('GCC', '99.1.0')),
            ('FFTW', '3.3.10', '', ('GCC', '99.1.0')),
        ]
        """), "gfbf", "2099a")
    write(root, easyconfig_text("GCC", "99.1.0", easyblock="Bundle", body="""\
        dependencies = [('GCCcore', version), ('binutils', '2.42', '', ('GCCcore', version))]
        """), "GCC", "99.1.0")
    for version in ("99.1.0", "97.1.0"):
        write(root, easyconfig_text("GCCcore", version), "GCCcore", version)
    write(root, easyconfig_text("binutils", "2.42", GCCCORE), "binutils", "2.42", GCCCORE)
    write(root, easyconfig_text("FlexiBLAS", "3.4.5", GCC), "FlexiBLAS", "3.4.5", GCC)
    write(root, easyconfig_text("FFTW", "3.3.10", GCC), "FFTW", "3.3.10", GCC)


CUDA_DEP = "dependencies = [('CUDA', '{}', '', SYSTEM)]\n"


def write_packages(root: Path) -> None:
    # Python: 3.10.1 is newest (not 3.9.20, which sorts last as text); -bare and a Python
    # of another GCCcore are newer still but must not be chosen
    for version in ("3.9.20", "3.10.1"):
        package(root, "Python", version, GCCCORE, body="""\
            exts_list = [('pip', '25.0'), ('setuptools', '80.1.0', {'checksums': []})]
            """)
    package(root, "Python", "3.11.0", GCCCORE, "-bare")
    package(root, "Python", "3.12.0", ("GCCcore", "98.1.0"))
    # SciPy-bundle only at gfbf level, with extensions
    package(root, "SciPy-bundle", "2099.01", GFBF, easyblock="PythonBundle", body="""\
        exts_list = [('numpy', '2.9.0'), ('scipy', '1.99.0'), ('Pandas', '3.1.0'), 'plain']
        """)
    # networkx: 3.6 exists for foss only, which is not in gfbf's hierarchy
    package(root, "networkx", "3.5", GFBF)
    package(root, "networkx", "3.6", ("foss", "2099a"))
    # sympy: the same version at GCCcore and gfbf level; the nearest toolchain wins
    package(root, "sympy", "1.14.0", GCCCORE)
    package(root, "sympy", "1.14.0", GFBF)
    # PyYAML in a flat robot path layout, found by EasyBuild's naming convention too
    package(root, "PyYAML", "6.0.2", GCCCORE, flat=True)
    # CUDA at system level; 12.80.0 must not count as a 12.8.x
    for version in ("12.6.3", "12.8.0", "12.8.1", "12.80.0", "13.0.0"):
        package(root, "CUDA", version)
    # cuDNN and NCCL with a templated versionsuffix, resolved through their CUDA dependency
    package(root, "cuDNN", "9.1.0.70", versionsuffix="-CUDA-%(cudaver)s",
            body=CUDA_DEP.format("12.8.1"))
    package(root, "cuDNN", "9.10.0.1", versionsuffix="-CUDA-%(cudaver)s",
            body=CUDA_DEP.format("12.6.3"))
    package(root, "NCCL", "2.20.0", GCCCORE, "-CUDA-%(cudaver)s", body=CUDA_DEP.format("12.8.1"))
    # upstream's source easyconfigs of one release: CPU, CUDA and -whl
    package(root, "PyTorch", "2.9.1", ("gfbf", "2099a"), easyblock=None)
    package(root, "PyTorch", "2.9.1", ("gfbf", "2099a"), "-CUDA-%(cudaver)s", easyblock=None,
            body=CUDA_DEP.format("12.8.1"))
    package(root, "PyTorch", "2.9.1", ("gfbf", "2099a"), "-whl", easyblock="PythonBundle")


@pytest.fixture(scope="module")
def robot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("robot")
    write_toolchains(root)
    write_packages(root)
    return root


@pytest.fixture(scope="module")
def gfbf(robot: Path) -> Toolchain:
    return load_toolchain("gfbf/2099a", [str(robot)])


@pytest.fixture(scope="module")
def foss2025a() -> Toolchain:
    return load_toolchain("foss/2025a")


class TestLoadToolchain:
    def test_hierarchy_itself_first_down_to_system(self, gfbf: Toolchain, robot: Path) -> None:
        assert (gfbf.name, gfbf.version) == GFBF
        assert gfbf.hierarchy == (GFBF, GCC, GCCCORE, SYSTEM)
        assert gfbf.robot_paths == (str(robot),)

    def test_dash_spec_is_the_same_toolchain(self, gfbf: Toolchain, robot: Path) -> None:
        assert load_toolchain("gfbf-2099a", [str(robot)]) == gfbf

    def test_compiler_toolchain(self, robot: Path) -> None:
        assert load_toolchain("GCC/99.1.0", [str(robot)]).hierarchy == (GCC, GCCCORE, SYSTEM)

    def test_missing_toolchain_names_it_and_the_robot_path(self, robot: Path) -> None:
        with pytest.raises(ToolchainError, match=r"'gfbf/2098a' is not in the robot path") as err:
            load_toolchain("gfbf/2098a", [str(robot)])
        assert str(robot) in str(err.value)

    def test_missing_subtoolchain_easyconfig(self, tmp_path: Path) -> None:
        # gfbf/2099a names GCC/99.1.0, whose easyconfig is not there
        write(tmp_path, easyconfig_text("gfbf", "2099a", easyblock="Toolchain",
                                        body="dependencies = [('GCC', '99.1.0')]\n"),
              "gfbf", "2099a")
        with pytest.raises(ToolchainError, match=r"'gfbf/2099a' in robot path .*GCC"):
            load_toolchain("gfbf/2099a", [str(tmp_path)])

    def test_broken_toolchain_easyconfig(self, tmp_path: Path) -> None:
        write(tmp_path, "name = 'gfbf'\nversion = '2099b'\ndependencies = [(\n", "gfbf", "2099b")
        with pytest.raises(ToolchainError, match=r"'gfbf/2099b' in robot path .*Parsing"):
            load_toolchain("gfbf/2099b", [str(tmp_path)])

    def test_not_a_toolchain(self, robot: Path) -> None:
        with pytest.raises(ToolchainError, match=r"'Python' is not an EasyBuild toolchain"):
            load_toolchain("Python/3.10.1", [str(robot)])

    @pytest.mark.parametrize("spec", [
        "foss",  # no version
        "foss/",  # empty version
        "/2025a",  # empty name
        "foss/2025a/x",  # a path, not a toolchain
        "foss 2025a",  # a space
    ])
    def test_malformed_spec(self, spec: str, robot: Path) -> None:
        with pytest.raises(ToolchainError, match=rf"toolchain {spec!r} is not of the form"):
            load_toolchain(spec, [str(robot)])

    def test_missing_robot_folder(self, tmp_path: Path) -> None:
        with pytest.raises(ToolchainError, match=r"robot path folders .*nowhere.* do not exist"):
            load_toolchain("foss/2025a", [str(tmp_path / "nowhere")])

    def test_system_toolchain(self, robot: Path) -> None:
        system = load_toolchain("system", [str(robot)])
        assert system.hierarchy == (SYSTEM,)
        assert system.find("CUDA") is not None

    def test_errors_are_torchstack_errors(self) -> None:
        assert issubclass(ToolchainError, TorchstackError)


class TestFind:
    def test_newest_version_wins(self, gfbf: Toolchain) -> None:
        # 3.10.1 beats 3.9.20 (versions, not text); -bare and GCCcore/98.1.0 do not count
        python = gfbf.find("Python")
        assert python is not None
        assert (python.version, python.versionsuffix, python.toolchain) == ("3.10.1", "", GCCCORE)
        assert python.path.endswith("Python-3.10.1-GCCcore-99.1.0.eb")

    def test_subtoolchain_lookup(self, robot: Path) -> None:
        # GCC/99.1.0 sees GCCcore's Python but not gfbf's SciPy-bundle
        gcc = load_toolchain("GCC/99.1.0", [str(robot)])
        python = gcc.find("Python")
        assert python is not None and python.toolchain == GCCCORE
        assert gcc.find("SciPy-bundle") is None

    def test_parent_toolchain_level(self, gfbf: Toolchain) -> None:
        bundle = gfbf.find("SciPy-bundle")
        assert bundle is not None and (bundle.version, bundle.toolchain) == ("2099.01", GFBF)

    def test_toolchain_outside_the_hierarchy_is_ignored(self, gfbf: Toolchain) -> None:
        networkx = gfbf.find("networkx")
        assert networkx is not None and networkx.version == "3.5"  # 3.6 is foss/2099a's

    def test_same_version_nearest_toolchain_wins(self, gfbf: Toolchain) -> None:
        sympy = gfbf.find("sympy")
        assert sympy is not None and sympy.toolchain == GFBF

    def test_flat_robot_layout(self, gfbf: Toolchain, robot: Path) -> None:
        pyyaml = gfbf.find("PyYAML")
        assert pyyaml is not None and Path(pyyaml.path).parent == robot

    def test_versionsuffix(self, gfbf: Toolchain) -> None:
        bare = gfbf.find("Python", versionsuffix="-bare")
        assert bare is not None and bare.version == "3.11.0"

    @pytest.mark.parametrize(("prefix", "expected"), [
        ("12.8", "12.8.1"),  # newest 12.8.x, and 12.80.0 is not one
        ("12.8.", "12.8.1"),  # a trailing dot means the same
        ("12.6", "12.6.3"),
        ("13", "13.0.0"),  # a major alone
        ("12.8.0", "12.8.0"),  # an exact version
        ("12.9", None),  # none in the robot path
        ("", "13.0.0"),  # no prefix: the newest of all
    ])
    def test_version_prefix(self, gfbf: Toolchain, prefix: str, expected: str | None) -> None:
        found = gfbf.find("CUDA", version_prefix=prefix)
        assert (found and found.version) == expected
        assert found is None or found.toolchain == SYSTEM

    @pytest.mark.parametrize(("name", "suffix", "expected"), [
        # the suffix comes from the template -CUDA-%(cudaver)s, resolved by EasyBuild
        ("cuDNN", "-CUDA-12.8.1", ("9.1.0.70", SYSTEM)),
        ("cuDNN", "-CUDA-12.6.3", ("9.10.0.1", SYSTEM)),
        ("NCCL", "-CUDA-12.8.1", ("2.20.0", GCCCORE)),
        ("NCCL", "-CUDA-12.6.3", None),
        ("cuDNN", "", None),  # no cuDNN without a CUDA suffix
    ])
    def test_cuda_versionsuffix(self, gfbf: Toolchain, name: str, suffix: str,
                                expected: tuple[str, tuple[str, str]] | None) -> None:
        found = gfbf.find(name, versionsuffix=suffix)
        assert (found and (found.version, found.toolchain)) == expected

    def test_unknown_name(self, gfbf: Toolchain) -> None:
        assert gfbf.find("NoSuchSoftware") is None


class TestPython:
    def test_python_of_the_toolchain(self, gfbf: Toolchain) -> None:
        assert gfbf.python == gfbf.find("Python")

    def test_missing_python(self, robot: Path) -> None:
        old = load_toolchain("GCCcore/97.1.0", [str(robot)])
        with pytest.raises(ToolchainError, match=r"no Python easyconfig for toolchain "
                                                 r"'GCCcore/97.1.0'"):
            _ = old.python


class TestBrokenEasyconfig:
    """A broken file met in a search is skipped with a debug log; asked for by path, it raises."""

    @pytest.fixture
    def broken(self, tmp_path: Path) -> Path:
        text = easyconfig_text("Python", "3.99.0", GCCCORE, body="exts_list = [(\n")
        return write(tmp_path, text, "Python", "3.99.0", GCCCORE)

    def test_skipped_in_a_search(self, broken: Path, robot: Path,
                                 caplog: pytest.LogCaptureFixture) -> None:
        # the broken newest Python sits in a robot path before the good one
        caplog.set_level(logging.DEBUG, logger="torchstack.generator.toolchains")
        toolchain = load_toolchain("gfbf/2099a", [str(broken.parents[2]), str(robot)])
        python = toolchain.python
        assert python.version == "3.10.1"
        skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
        assert skipped and str(broken) in skipped[0] and "Parsing easyconfig file failed" in \
            skipped[0]

    def test_easybuild_stays_quiet(self, broken: Path, robot: Path,
                                   caplog: pytest.LogCaptureFixture) -> None:
        # EasyBuild logs each error it raises; at the CLI's WARNING level none may show
        caplog.set_level(logging.WARNING)
        load_toolchain("gfbf/2099a", [str(broken.parents[2]), str(robot)]).find("Python")
        assert not [r for r in caplog.records if r.name.startswith("fancyroot")]

    def test_asked_for_by_path(self, broken: Path) -> None:
        with pytest.raises(ToolchainError, match=r"Python-3.99.0-GCCcore-99.1.0.eb' cannot be "
                                                 r"parsed: Parsing easyconfig file failed"):
            easyblock_of(broken)


class TestDependency:
    @pytest.mark.parametrize(("dep", "parent", "expected"), [
        # a subtoolchain's dependency: EasyBuild finds the subtoolchain itself
        (("Python", "3.13.1", "", GCCCORE), ("foss", "2025a"), ("Python", "3.13.1")),
        # the system toolchain must be named, with an empty suffix before it
        (("CUDA", "12.8.0", "", SYSTEM), ("foss", "2025a"), ("CUDA", "12.8.0", "", SYSTEM_DICT)),
        (("cuDNN", "9.10.1.4", "-CUDA-12.8.0", SYSTEM), ("foss", "2025a"),
         ("cuDNN", "9.10.1.4", "-CUDA-12.8.0", SYSTEM_DICT)),
        # a suffix alone
        (("NCCL", "2.26.6", "-CUDA-12.8.0", GCCCORE), ("foss", "2025a"),
         ("NCCL", "2.26.6", "-CUDA-12.8.0")),
        # within a system-toolchain easyconfig system is implied
        (("CUDA", "12.8.0", "", SYSTEM), SYSTEM, ("CUDA", "12.8.0")),
    ])
    def test_as_easyconfig_tuple(self, dep: tuple[str, str, str, tuple[str, str]],
                                 parent: tuple[str, str], expected: tuple[object, ...]) -> None:
        assert Dependency(*dep, path="x.eb").as_easyconfig_tuple(parent) == expected

    def test_tuple_reads_back_as_easybuild_writes_it(self, foss2025a: Toolchain) -> None:
        # upstream's PyTorch -whl easyconfig lists CUDA exactly so
        cuda = foss2025a.find("CUDA", version_prefix="12.8")
        assert cuda is not None
        parent = (foss2025a.name, foss2025a.version)
        assert cuda.as_easyconfig_tuple(parent) == ("CUDA", "12.8.0", "", SYSTEM_DICT)



class TestSourceEasyconfig:
    @pytest.mark.parametrize(("suffix", "expected"), [
        ("", "PyTorch-2.9.1-gfbf-2099a.eb"),
        ("-CUDA-12.8.1", "PyTorch-2.9.1-gfbf-2099a-CUDA-12.8.1.eb"),
        ("-whl", "PyTorch-2.9.1-gfbf-2099a-whl.eb"),
        ("-CUDA-12.6.3", None),  # no such variant
    ])
    def test_exact_match(self, gfbf: Toolchain, suffix: str, expected: str | None) -> None:
        found = source_easyconfig("PyTorch", "2.9.1", gfbf, suffix)
        assert (found and found.name) == expected

    def test_other_version(self, gfbf: Toolchain) -> None:
        assert source_easyconfig("PyTorch", "2.9.2", gfbf) is None

    def test_real_source_easyconfig(self, foss2025a: Toolchain) -> None:
        found = source_easyconfig("PyTorch", "2.9.1", foss2025a, "-CUDA-12.8.0")
        assert found is not None and found.name == "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0.eb"
        assert easyblock_of(found) is None  # EasyBuild derives EB_PyTorch from the name


class TestEasyblockOf:
    def test_declared(self, gfbf: Toolchain) -> None:
        whl = source_easyconfig("PyTorch", "2.9.1", gfbf, "-whl")
        assert whl is not None and easyblock_of(whl) == "PythonBundle"

    def test_derived(self, gfbf: Toolchain) -> None:
        source = source_easyconfig("PyTorch", "2.9.1", gfbf)
        assert source is not None and easyblock_of(source) is None

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ToolchainError, match=r"easyconfig '.*absent.eb' does not exist"):
            easyblock_of(tmp_path / "absent.eb")


class TestProvidedPackages:
    def test_bundle_extensions_and_itself(self, gfbf: Toolchain) -> None:
        bundle = gfbf.find("SciPy-bundle")
        assert bundle is not None
        # canonical names; an entry without a version ('plain') provides nothing known
        assert provided_packages(bundle) == {"scipy-bundle": "2099.01", "numpy": "2.9.0",
                                             "scipy": "1.99.0", "pandas": "3.1.0"}

    def test_python_extensions(self, gfbf: Toolchain) -> None:
        assert provided_packages(gfbf.python) == {"python": "3.10.1", "pip": "25.0",
                                                  "setuptools": "80.1.0"}

    def test_real_scipy_bundle(self, foss2025a: Toolchain) -> None:
        bundle = foss2025a.find("SciPy-bundle")
        assert bundle is not None
        packages = provided_packages(bundle)
        assert {"numpy", "scipy", "pandas"} <= packages.keys()
        assert packages["numpy"].startswith("2.")


class TestInstalledEasyconfigs:
    """The installed easybuild-easyconfigs, the default robot path."""

    def test_default_robot_path_is_the_installed_easyconfigs(self) -> None:
        paths = default_robot_paths()
        assert paths and all(Path(p, "f", "foss", "foss-2025a.eb").is_file() for p in paths[:1])

    def test_foss2025a(self, foss2025a: Toolchain) -> None:
        assert foss2025a.hierarchy == (("foss", "2025a"), ("gompi", "2025a"), ("gfbf", "2025a"),
                                       ("GCC", "14.2.0"), ("GCCcore", "14.2.0"), SYSTEM)
        python = foss2025a.python
        assert (python.version, python.versionsuffix, python.toolchain) == (
            "3.13.1", "", ("GCCcore", "14.2.0"))
        assert Path(python.path).name == "Python-3.13.1-GCCcore-14.2.0.eb"  # not Python-bare
        bundle = foss2025a.find("SciPy-bundle")
        assert bundle is not None and (bundle.version, bundle.toolchain) == (
            "2025.06", ("gfbf", "2025a"))
        networkx = foss2025a.find("networkx")
        assert networkx is not None and networkx.version == "3.5"

    def test_foss2025a_cuda128(self, foss2025a: Toolchain) -> None:
        cuda = foss2025a.find("CUDA", version_prefix="12.8")
        assert cuda is not None and (cuda.version, cuda.toolchain) == ("12.8.0", SYSTEM)
        for name in ("cuDNN", "NCCL"):
            found = foss2025a.find(name, versionsuffix="-CUDA-12.8.0")
            assert found is not None, name
            assert found.toolchain in foss2025a.hierarchy
            assert Path(found.path).name.endswith("-CUDA-12.8.0.eb")

    @pytest.mark.parametrize(("spec", "python", "gcc"), [
        ("foss/2024a", "3.12.3", "13.3.0"),
        ("foss-2023a", "3.11.3", "12.3.0"),  # not Python 2.7.18 of the same GCCcore
        ("gfbf/2025a", "3.13.1", "14.2.0"),
    ])
    def test_python_per_toolchain(self, spec: str, python: str, gcc: str) -> None:
        toolchain = load_toolchain(spec)
        assert toolchain.python.version == python
        assert toolchain.python.toolchain == ("GCCcore", gcc)
        assert ("GCC", gcc) in toolchain.hierarchy

    def test_missing_toolchain(self) -> None:
        with pytest.raises(ToolchainError, match=r"'foss/2099z' is not in the robot path "
                                                 r".*easybuild/easyconfigs"):
            load_toolchain("foss/2099z")


class TestEasyBuildConfiguration:
    """Reading toolchains leaves EasyBuild's process-wide configuration as it was."""

    def test_enclosing_configuration_is_restored(self, robot: Path) -> None:
        from easybuild.tools.config import BuildOptions, build_option, init_build_options

        instances = BuildOptions.__class__._instances
        saved = instances.pop(BuildOptions, None)
        init_build_options(build_options={"robot_path": ["/outer/robot"]})
        try:
            toolchain = load_toolchain("GCC/99.1.0", [str(robot)])
            assert toolchain.find("Python") is not None
            assert build_option("robot_path") == ["/outer/robot"]
        finally:
            instances.pop(BuildOptions, None)
            if saved is not None:
                instances[BuildOptions] = saved

    def test_no_configuration_left_behind(self, gfbf: Toolchain) -> None:
        from easybuild.tools.config import BuildOptions

        instances = BuildOptions.__class__._instances
        before = (dict(instances), tempfile.tempdir, os.umask(0o022))
        os.umask(before[2])
        assert gfbf.find("Python", version_prefix="3.9") is not None
        assert (dict(instances), tempfile.tempdir, os.umask(before[2])) == before

    def test_no_files_and_no_output(self, tmp_path: Path) -> None:
        # a fresh process logging at WARNING as the CLI does, a broken easyconfig on the way:
        # no log file in the working folder, no ~/.local/easybuild, nothing in the temporary
        # folder, nothing on stdout but the answer and nothing on stderr
        cwd, home, tmp, broken = (tmp_path / d for d in ("cwd", "home", "tmp", "broken"))
        for folder in (cwd, home, tmp):
            folder.mkdir()
        write(broken, "name = 'Python'\nexts_list = [(\n", "Python", "3.99.0",
              ("GCCcore", "14.2.0"))
        code = textwrap.dedent(f"""\
            import logging
            logging.basicConfig(level=logging.WARNING)
            from torchstack.generator.toolchains import default_robot_paths, load_toolchain
            tc = load_toolchain('foss/2025a', [{str(broken)!r}, *default_robot_paths()])
            print(tc.python.version, tc.find('SciPy-bundle').version)
            """)
        env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)}
        env = {k: v for k, v in env.items() if not k.startswith("EASYBUILD_")}
        done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                              capture_output=True, text=True, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (0, "3.13.1 2025.06\n", "")
        assert [list(folder.iterdir()) for folder in (cwd, home, tmp)] == [[], [], []]
