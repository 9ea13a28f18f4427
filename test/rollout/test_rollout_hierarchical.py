"""Module defaults in hierarchical module trees: EasyBuild's HierarchicalMNS, real eb and Lmod.

The real eb installs two PyTorch modules and a consumer under HierarchicalMNS: SYSTEM
toolchain, so `Core/PyTorch/2.6.0-whl`, `Core/PyTorch/2.6.0` and `Core/fakeops/1.0` in
`modules/all/Core`, which is what a user's MODULEPATH holds. Each folder gets its own
default, named as Lmod names the module there (`PyTorch/2.6.0`). The Compiler and MPI levels
are prepared by hand beside them (they need a compiler toolchain installed by eb first): one
folder each, one default each, none overwriting another.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from support.ebenv import LMOD_CMD, LMOD_INIT, EasyBuildEnv

from torchstack.rollout.defaults import Default, write_defaults

MPI = "MPI/GCC/13.2.0/OpenMPI/4.1.6"
PAIR = ("Core/PyTorch/2.6.0-whl", "Core/PyTorch/2.6.0")


def bundle(path: Path, name: str, version: str, suffix: str) -> Path:
    """A small real installation: a Bundle whose module sets PICKED to its own version."""
    path.write_text(textwrap.dedent(f"""\
        easyblock = 'Bundle'
        name = {name!r}
        version = {version!r}
        versionsuffix = {suffix!r}
        homepage = 'https://example.org/'
        description = "{name} (torchstack test)"
        toolchain = SYSTEM
        postinstallcmds = ['mkdir -p %(installdir)s/bin && touch %(installdir)s/bin/{name}']
        sanity_check_paths = {{'files': ['bin/{name}'], 'dirs': []}}
        modextravars = {{'PICKED_{name.upper()}': '{version}{suffix}'}}
        moduleclass = 'ai'
        """))
    return path


@pytest.fixture(scope="module")
def hmns(eb_env: EasyBuildEnv, tmp_path_factory: pytest.TempPathFactory) -> EasyBuildEnv:
    env = EasyBuildEnv(tmp_path_factory.mktemp("hmns"), eb_env.python_root).setup()
    for name, version, suffix in (("PyTorch", "2.6.0", "-whl"), ("PyTorch", "2.6.0", ""),
                                  ("fakeops", "1.0", "-whl"), ("fakeops", "1.0", "")):
        easyconfig = bundle(env.root / f"{name}-{version}{suffix}.eb", name, version, suffix)
        run = env.run_eb(str(easyconfig), "--module-naming-scheme=HierarchicalMNS")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return env


def picked(env: EasyBuildEnv, modulepath: str, load: str, variable: str) -> str:
    where = env.installpath / "modules" / "all" / modulepath
    script = (f"source {LMOD_INIT}\nexport MODULEPATH={where}\nmodule load {load}\n"
              f"echo PICKED=${variable}")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(env.root),
                              "LMOD_CMD": str(LMOD_CMD)})
    assert run.returncode == 0, run.stderr
    return run.stdout.split("PICKED=")[1].strip()


class TestHierarchicalMNS:
    def test_eb_wrote_three_part_names(self, hmns: EasyBuildEnv) -> None:
        assert (hmns.installpath / "modules" / "all" / "Core" / "PyTorch" / "2.6.0.lua").is_file()

    def test_promote_and_rollback_each_folder(self, hmns: EasyBuildEnv) -> None:
        promoted = [Default("Core/PyTorch/2.6.0", "2.6.0"), Default("Core/fakeops/1.0", "1.0")]
        written = write_defaults(hmns.installpath, promoted, PAIR)
        core = hmns.installpath / "modules" / "all" / "Core"
        assert written == [core / "PyTorch" / ".modulerc.lua", core / "fakeops" / ".modulerc.lua"]
        assert picked(hmns, "Core", "PyTorch", "PICKED_PYTORCH") == "2.6.0"
        assert picked(hmns, "Core", "fakeops", "PICKED_FAKEOPS") == "1.0"
        rolled = [Default("Core/PyTorch/2.6.0-whl", "2.6.0"), Default("Core/fakeops/1.0-whl")]
        write_defaults(hmns.installpath, rolled, PAIR)
        assert picked(hmns, "Core", "PyTorch", "PICKED_PYTORCH") == "2.6.0-whl"
        assert picked(hmns, "Core", "PyTorch/2.6.0", "PICKED_PYTORCH") == "2.6.0"  # a file
        assert picked(hmns, "Core", "fakeops", "PICKED_FAKEOPS") == "1.0-whl"

    def test_levels_keep_their_own_defaults(self, hmns: EasyBuildEnv) -> None:
        """FROM in Core, TO at the MPI level: rollback removes TO's block there."""
        top = hmns.installpath / "modules" / "all"
        folder = top / MPI / "PyTorch"
        folder.mkdir(parents=True)
        (folder / "2.6.0.lua").write_text('setenv("PICKED_PYTORCH", "mpi-2.6.0")\n')
        (folder / "2.5.0.lua").write_text('setenv("PICKED_PYTORCH", "mpi-2.5.0")\n')
        pair = ("Core/PyTorch/2.6.0-whl", f"{MPI}/PyTorch/2.6.0")
        write_defaults(hmns.installpath, [Default(f"{MPI}/PyTorch/2.6.0", "2.6.0"),
                                          Default("Core/PyTorch/2.6.0-whl")], pair)
        assert picked(hmns, MPI, "PyTorch", "PICKED_PYTORCH") == "mpi-2.6.0"
        assert picked(hmns, "Core", "PyTorch", "PICKED_PYTORCH") == "2.6.0-whl"
        write_defaults(hmns.installpath, [Default("Core/PyTorch/2.6.0-whl")], pair)
        assert not (folder / ".modulerc.lua").exists()  # the promotion's block taken back
        assert picked(hmns, "Core", "PyTorch", "PICKED_PYTORCH") == "2.6.0-whl"
