"""scan on hierarchical module trees (EasyBuild's HierarchicalMNS), checked against the real Lmod.

The tree has the levels of a foss-like toolchain: `Core` with GCCcore/13.2.0 and GCC/13.2.0
(GCC loads GCCcore; each adds its `Compiler/<name>/13.2.0` to MODULEPATH), OpenMPI/4.1.6 at the
GCC level (adds `MPI/GCC/13.2.0/OpenMPI/4.1.6`), and PyTorch modules at several levels. Module
files say where their installation is (`local root`, `set root`), as EasyBuild writes them.
Every MODULEPATH that `modulepaths` derives and every load it resolves under one is compared
with what Lmod does after `module load` of the toolchain modules.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.ebenv import LMOD_CMD, LMOD_INIT
from support.scantree import consumer, provider

from torchstack.guards.moduleloads import module_facts
from torchstack.guards.modulepaths import Hierarchy, read_hierarchy
from torchstack.guards.moduletree import read_tree
from torchstack.guards.record import write_fingerprint
from torchstack.guards.scan import plan_swap, scan_installpath

GCC = "Compiler/GCC/13.2.0"
GCCCORE = "Compiler/GCCcore/13.2.0"
MPI = "MPI/GCC/13.2.0/OpenMPI/4.1.6"
PYTORCH = {f"Core/PyTorch/{v}" for v in ("2.5.0", "2.6.0")} | {f"{GCC}/PyTorch/{v}"
                                                               for v in ("2.4.0", "2.6.0")}


def write_module(top: Path, full: str, body: str = "", root: str | None = None,
                 syntax: str = "lua") -> None:
    """A module file as EasyBuild writes one: its root (software/<name>/<version>), then body."""
    name, version = full.rsplit("/", 2)[-2:]
    installation = root if root is not None else str(
        top.parent.parent / "software" / name / version)
    path = top / (f"{full}.lua" if syntax == "lua" else full)
    path.parent.mkdir(parents=True, exist_ok=True)
    if syntax == "lua":
        path.write_text(f'local root = "{installation}"\n{body}')
    else:
        path.write_text(f"#%Module\nset root {installation}\n{body}")


def toolchains(top: Path) -> None:
    write_module(top, "Core/GCCcore/13.2.0", f'prepend_path("MODULEPATH", "{top / GCCCORE}")\n')
    write_module(top, "Core/GCC/13.2.0", 'load("GCCcore/13.2.0")\n'
                 f'prepend_path("MODULEPATH", "{top / GCC}")\n')
    write_module(top, f"{GCC}/OpenMPI/4.1.6", f"module use {top / MPI}\n", syntax="tcl")
    for full in PYTORCH:
        write_module(top, full)
    (top / MPI).mkdir(parents=True)  # EasyBuild makes the folders it adds to MODULEPATH
    (top / GCCCORE).mkdir(parents=True)


def lmod_after(top: Path, loads: str, written: str) -> tuple[tuple[str, ...], str | None]:
    """MODULEPATH (as levels) after `module load LOADS` from Core, and the module Lmod loads
    for `module load WRITTEN` then."""
    script = (f"source {LMOD_INIT}\nexport MODULEPATH={top / 'Core'}\nmodule load {loads}\n"
              f"echo MP=$MODULEPATH\nmodule load {written} && echo FILES=$_LMFILES_")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(top),
                              "LMOD_CMD": str(LMOD_CMD)}, check=False)
    path = tuple(str(Path(p).relative_to(top))
                 for p in run.stdout.split("MP=")[1].split()[0].split(":"))
    if "FILES=" not in run.stdout:
        return path, None
    last = Path(run.stdout.split("FILES=")[1].split()[0].split(":")[-1])
    return path, str(last.relative_to(top)).removesuffix(".lua")


def hierarchy(top: Path) -> Hierarchy:
    whole = read_tree(top)
    return read_hierarchy(whole, {name: module_facts(path)
                                  for name, path in whole.modules.items()})


@pytest.fixture
def top(tmp_path: Path) -> Path:
    top = tmp_path / "install" / "modules" / "all"
    toolchains(top)
    return top


CASES = [
    pytest.param("", "PyTorch", id="core-default"),
    pytest.param("GCC/13.2.0", "PyTorch", id="same-name-first-level-wins"),
    pytest.param("GCC/13.2.0", "PyTorch/2.5.0", id="from-a-level-above"),
    pytest.param("GCC/13.2.0", "PyTorch/2.4", id="extended-default-below"),
    pytest.param("GCC/13.2.0 OpenMPI/4.1.6", "PyTorch/2.6.0", id="from-the-mpi-level"),
    pytest.param("GCCcore/13.2.0", "PyTorch", id="gcccore-alone"),
]


class TestModulepaths:
    @pytest.mark.parametrize(("loads", "written"), CASES)
    def test_as_lmod_loads(self, top: Path, loads: str, written: str) -> None:
        """MODULEPATH after loading the toolchain modules, and the module a load names then."""
        found = hierarchy(top)
        path: tuple[str, ...] = ("Core",)
        for name in loads.split():
            path = found.after_load(found.resolve(name, path).module or "", path)
        ours = (path, found.resolve(written, path).module)
        if loads:
            assert ours == lmod_after(top, loads, written)
        else:
            assert ours[1] == lmod_resolves(top, f"export MODULEPATH={top / 'Core'}", written)

    def test_marked_default_of_a_later_level_wins(self, top: Path) -> None:
        (top / "Core" / "PyTorch" / ".modulerc.lua").write_text(
            'module_version("PyTorch/2.5.0", "default")\n')
        found = hierarchy(top)
        path = (GCC, GCCCORE, "Core")
        assert found.resolve("PyTorch", path).module == "Core/PyTorch/2.5.0"
        assert lmod_after(top, "GCC/13.2.0", "PyTorch") == (path, "Core/PyTorch/2.5.0")

    def test_levels_and_their_modulepaths(self, top: Path) -> None:
        write_module(top, f"{MPI}/fakeops/1.0")
        found = hierarchy(top)
        assert sorted(found.levels) == sorted(["", "Core", GCC, GCCCORE, MPI])
        assert found.modulepaths(f"{MPI}/fakeops/1.0") == ((MPI, GCC, GCCCORE, "Core"),)
        assert lmod_after(top, "GCC/13.2.0 OpenMPI/4.1.6", "GCC")[0] == (MPI, GCC, GCCCORE,
                                                                         "Core")
        # GCCcore's level is reached by loading GCCcore alone, or GCC (which loads it)
        assert set(found.modulepaths(f"{GCCCORE}/x/1")) == {(GCCCORE, "Core"),
                                                             (GCC, GCCCORE, "Core")}


def lmod_resolves(top: Path, setup: str, written: str) -> str | None:
    script = (f"source {LMOD_INIT}\n{setup}\nmodule load {written} && echo FILES=$_LMFILES_")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(top),
                              "LMOD_CMD": str(LMOD_CMD)}, check=False)
    if "FILES=" not in run.stdout:
        return None
    last = Path(run.stdout.split("FILES=")[1].split()[0].split(":")[-1])
    return str(last.relative_to(top)).removesuffix(".lua")


# -- scan on an install path with such a tree -----------------------------------------------------


def installation(top: Path, full: str, fingerprint: object | None) -> None:
    name, version = full.rsplit("/", 2)[-2:]
    folder = top.parent.parent / "software" / name / version
    folder.mkdir(parents=True, exist_ok=True)
    if fingerprint is not None:
        write_fingerprint(folder, fingerprint)  # type: ignore[arg-type]


@pytest.fixture
def installpath(top: Path) -> Path:
    """Providers at two levels (same installation folder names as EasyBuild gives them:
    software/PyTorch/<version>), consumers at the MPI and the GCCcore level."""
    for full in PYTORCH:
        write_module(top, full, root=str(top.parent.parent / "software" / "PyTorch"
                                         / (full.rsplit("/", 1)[1] + ("-GCC" if GCC in full
                                                                       else ""))))
        installation(top, f"PyTorch/{full.rsplit('/', 1)[1]}" + ("-GCC" if GCC in full else ""),
                     provider("2.6.0+cpu"))
    vision = consumer("torchvision", "0.21.0+cpu", "cxx", "==2.6.0", "2.6.0", cxx11_abi=True)
    write_module(top, f"{MPI}/torchvision/0.21.0", 'depends_on("PyTorch/2.6.0")\n')
    installation(top, "torchvision/0.21.0", vision)
    write_module(top, f"{GCCCORE}/lightning/2.5.0", 'depends_on("PyTorch")\n')
    installation(top, "lightning/2.5.0", consumer("lightning", "2.5.0", "python", ">=2.5",
                                                  None))
    for version in ("2.4.0", "2.5.0"):  # make the PyTorch of GCC's level differ for 'PyTorch'
        (top / GCC / "PyTorch" / f"{version}.lua").unlink(missing_ok=True)
    return top.parent.parent


class TestScan:
    def test_consumer_at_the_mpi_level_runs_on_the_gcc_level(self, installpath: Path) -> None:
        found = scan_installpath(installpath)
        vision = found.get(f"{MPI}/torchvision/0.21.0")
        assert vision is not None and vision.runs_on == f"{GCC}/PyTorch/2.6.0"
        assert vision.software == installpath / "software" / "torchvision" / "0.21.0"
        report = plan_swap(found, f"{GCC}/PyTorch/2.6.0", "Core/PyTorch/2.5.0")
        assert [o.module for o in report.stays_safe] == [f"{MPI}/torchvision/0.21.0"]

    def test_different_pytorch_by_the_toolchain_loaded_is_not_checked(
            self, installpath: Path) -> None:
        """lightning (GCCcore level) loads `PyTorch`: Core's 2.6.0 after GCCcore alone, GCC's
        2.6.0 after GCC, and Lmod agrees."""
        found = scan_installpath(installpath)
        lightning = found.get(f"{GCCCORE}/lightning/2.5.0")
        assert lightning is not None and lightning.runs_on is None
        assert lightning.undetermined and "by the toolchain modules loaded" in \
            lightning.undetermined
        report = plan_swap(found, "Core/PyTorch/2.6.0", "Core/PyTorch/2.5.0")
        assert f"{GCCCORE}/lightning/2.5.0" in [n.module for n in report.not_checked]
        assert not report.safe
        top = installpath / "modules" / "all"
        assert lmod_after(top, "GCCcore/13.2.0", "PyTorch")[1] == "Core/PyTorch/2.6.0"
        assert lmod_after(top, "GCC/13.2.0", "PyTorch")[1] == f"{GCC}/PyTorch/2.6.0"

    def test_root_that_is_gone_is_not_checked(self, installpath: Path) -> None:
        top = installpath / "modules" / "all"
        write_module(top, f"{MPI}/torchaudio/2.6.0", 'depends_on("PyTorch/2.6.0")\n',
                     root=str(installpath / "software" / "gone" / "1"))
        found = scan_installpath(installpath)
        audio = found.get(f"{MPI}/torchaudio/2.6.0")
        assert audio is not None and audio.role == "unknown"
        assert audio.unreadable is not None and "gone" in audio.unreadable
        report = plan_swap(found, f"{GCC}/PyTorch/2.6.0", "Core/PyTorch/2.5.0")
        assert f"{MPI}/torchaudio/2.6.0" in [n.module for n in report.not_checked]

    def test_no_root_falls_back_to_the_flat_layout(self, tmp_path: Path) -> None:
        top = tmp_path / "modules" / "all"
        (top / "PyTorch").mkdir(parents=True)
        (top / "PyTorch" / "2.6.0.lua").write_text("-- hand-written, no root\n")
        installation(top, "PyTorch/2.6.0", provider("2.6.0+cpu"))
        found = scan_installpath(tmp_path)
        module = found.get("PyTorch/2.6.0")
        assert module is not None and module.is_provider
        assert module.software == tmp_path / "software" / "PyTorch" / "2.6.0"
