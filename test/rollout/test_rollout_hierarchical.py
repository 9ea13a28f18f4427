"""Module defaults in hierarchical module trees: EasyBuild's HierarchicalMNS, real eb and Lmod.

The real eb installs two PyTorch modules and a consumer under HierarchicalMNS: SYSTEM
toolchain, so `Core/PyTorch/2.6.0-whl`, `Core/PyTorch/2.6.0` and `Core/fakeops/1.0` in
`modules/all/Core`, which is what a user's MODULEPATH holds. Each folder gets its own
default, named as Lmod names the module there (`PyTorch/2.6.0`). The Compiler and MPI levels
are prepared by hand beside them (they need a compiler toolchain installed by eb first): one
folder each, one default each, none overwriting another.

The whole rollout on such a tree (`TestRolloutOnHierarchy`): the real eb with HierarchicalMNS
and the hooks file builds the small libtorch of support/fakelibtorch.py twice in Core, as the
pre-C++11 wheel module FROM and the C++11 source build TO, the compiler GCCcore/system (which
adds `Compiler/GCCcore/system` to MODULEPATH) and on it the C++ consumer fakeops on FROM, whose
module file loads `PyTorch/2.6.0-whl`, a name that exists only under Core. scan relates the
consumer to FROM through the module paths, the swap refuses it by the C++ ABI rule, promote
is refused until the plan's easyconfig is built on TO, then promote and rollback each switch
what `module load GCCcore/system fakeops` gives under Lmod.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.easyconfigtext import easyconfig_text
from support.ebenv import LMOD_CMD, LMOD_INIT, PYTHON_VERSION, EasyBuildEnv
from support.fakelibtorch import (
    BLAS,
    RELEASE,
    consumer_source,
    run_eb,
    torch_easyconfig,
    torch_source,
    write_blas_module,
)
from support.wheelbuild import sha256

from torchstack.cli import main
from torchstack.rollout.defaults import Default, write_defaults

MPI = "MPI/GCC/13.2.0/OpenMPI/4.1.6"
PAIR = ("Core/PyTorch/2.6.0-whl", "Core/PyTorch/2.6.0")


def bundle(path: Path, name: str, version: str, suffix: str) -> Path:
    """A small real installation: a Bundle whose module sets PICKED to its own version."""
    path.write_text(easyconfig_text(name, version, easyblock="Bundle", versionsuffix=suffix,
                                    moduleclass="ai", body=f"""\
        postinstallcmds = ['mkdir -p %(installdir)s/bin && touch %(installdir)s/bin/{name}']
        sanity_check_paths = {{'files': ['bin/{name}'], 'dirs': []}}
        modextravars = {{'PICKED_{name.upper()}': '{version}{suffix}'}}
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


# -- the whole rollout, real eb with HierarchicalMNS and the real Lmod ----------------------------

HMNS = "--module-naming-scheme=HierarchicalMNS"
FROM, TO = f"Core/PyTorch/{RELEASE}-whl", f"Core/PyTorch/{RELEASE}"
LEVEL = "Compiler/GCCcore/system"  # what the GCCcore/system module adds to MODULEPATH
OPS, NEW_OPS = f"{LEVEL}/fakeops/1.0-whl", f"{LEVEL}/fakeops/1.0"
CALL_OPS = "import fakeops; assert fakeops.schema('add') == 'aten::add', fakeops.schema('add')"


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _eb(env: EasyBuildEnv, easyconfig: str, *robot: Path) -> None:
    """The real eb under HierarchicalMNS; the robot path gives the dependencies' easyconfigs,
    which the scheme reads to name their modules."""
    paths = ":".join(str(p) for p in (env.root / "stand-ins", env.root, *robot))
    code, output = run_eb(env, easyconfig, HMNS, f"--robot-paths={paths}:")
    assert code == 0, output


def _stand_ins(env: EasyBuildEnv) -> None:
    """Python and FlexiBLAS as Core modules of the tree (with an easyconfig each, for their
    names), each with its own empty installation, as a module EasyBuild wrote would have."""
    stubs = env.root / "stand-ins"
    stubs.mkdir()
    write_blas_module(env.site_modules)
    for (name, version), kind in (((("Python", PYTHON_VERSION)), "lang"), (BLAS, "numlib")):
        (stubs / f"{name}-{version}.eb").write_text(easyconfig_text(
            name, version, easyblock="Bundle", description=f"{name} (torchstack test stand-in)",
            moduleclass=kind))
        installation = env.root / "stand-in-roots" / name
        installation.mkdir(parents=True)
        folder = env.installpath / "modules" / "all" / "Core" / name
        folder.mkdir(parents=True)
        text = (env.site_modules / name / f"{version}.lua").read_text()
        (folder / f"{version}.lua").write_text(f'local root = "{installation}"\n' + text)


def _compiler_consumer(env: EasyBuildEnv, tarball: Path) -> Path:
    """fakeops built with the GCCcore/system toolchain on FROM: a module at the Compiler level."""
    path = env.root / "fakeops-1.0-GCCcore-system-whl.eb"
    dependencies = [("Python", PYTHON_VERSION, "", "SYSTEM"),
                    ("PyTorch", RELEASE, "-whl", "SYSTEM")]
    path.write_text(easyconfig_text(
        "fakeops", "1.0", ("GCCcore", "system"), easyblock="PythonPackage", versionsuffix="-whl",
        homepage="https://pytorch.org/", moduleclass="ai",
        description="A consumer of torch built from source (torchstack test)", body=f"""\
        sources = [{tarball.name!r}]
        checksums = [{sha256(tarball)!r}]
        dependencies = {dependencies!r}
        """).replace("'SYSTEM'", "SYSTEM"))
    return path


@pytest.fixture(scope="module")
def tree(eb_env: EasyBuildEnv, tmp_path_factory: pytest.TempPathFactory) -> EasyBuildEnv:
    env = EasyBuildEnv(tmp_path_factory.mktemp("hmns-rollout"), eb_env.python_root).setup()
    _stand_ins(env)
    torch, ops = torch_source(env.root), consumer_source(env.root)
    env.stage_source("PyTorch", torch)
    env.stage_source("fakeops", ops)
    for suffix, abi in (("-whl", "0"), ("", "1")):
        _eb(env, str(torch_easyconfig(env.root / f"PyTorch-{RELEASE}{suffix}.eb", suffix, torch,
                                      sha256(torch), (f"_GLIBCXX_USE_CXX11_ABI={abi}",))))
    _eb(env, "GCCcore-system.eb")
    _eb(env, str(_compiler_consumer(env, ops)))
    return env


@dataclass(frozen=True)
class Stages:
    """What each stage of the rollout answered, in order, and what Lmod loaded after it."""

    swap: tuple[int, dict[str, Any]]
    refused: tuple[int, str]
    plan: dict[str, Any]
    built: Path
    replanned: dict[str, Any]
    promoted: tuple[int, str]
    after_promote: subprocess.CompletedProcess[str]
    rolled_back: tuple[int, str]
    after_rollback: subprocess.CompletedProcess[str]


def user_loads(env: EasyBuildEnv, modules: str) -> subprocess.CompletedProcess[str]:
    """A user's `module load` with MODULEPATH at the top of the hierarchy, then the op called."""
    core = env.installpath / "modules" / "all" / "Core"
    return env.shell(f"export MODULEPATH={core}\nmodule load {modules}\n"
                     f"python -c {shlex.quote(CALL_OPS)}\necho LOADED=$LOADEDMODULES")


def loaded(run: subprocess.CompletedProcess[str]) -> set[str]:
    assert run.returncode == 0, run.stderr
    return set(run.stdout.split("LOADED=")[1].split()[0].split(":"))


@pytest.fixture(scope="module")
def stages(tree: EasyBuildEnv, tmp_path_factory: pytest.TempPathFactory) -> Stages:
    where = str(tree.installpath)
    code, swap, _ = _cli("scan", where, "--swap", FROM, TO, "--json")
    refused = _cli("rollout", "promote", where, FROM, TO)
    out = tmp_path_factory.mktemp("hmns-plan") / "easyconfigs"
    _, plan, _ = _cli("rollout", "plan", where, FROM, TO, "--out", str(out), "--json")
    built = out / "fakeops-1.0-GCCcore-system.eb"
    _eb(tree, str(built), out)
    _, replanned, _ = _cli("rollout", "plan", where, FROM, TO, "--json")
    promoted = _cli("rollout", "promote", where, FROM, TO)
    after_promote = user_loads(tree, "GCCcore/system fakeops")
    rolled_back = _cli("rollout", "rollback", where, FROM, TO)
    after_rollback = user_loads(tree, "GCCcore/system fakeops")
    return Stages((code, json.loads(swap)), refused[::2], json.loads(plan), built,
                  json.loads(replanned), promoted[:2], after_promote, rolled_back[:2],
                  after_rollback)


class TestRolloutOnHierarchy:
    def test_eb_put_the_consumer_at_the_compiler_level(self, tree: EasyBuildEnv) -> None:
        module = tree.installpath / "modules" / "all" / f"{OPS}.lua"
        assert f'depends_on("PyTorch/{RELEASE}-whl")' in module.read_text()

    def test_swap_judges_the_consumer_by_the_abi_rule(self, stages: Stages) -> None:
        code, report = stages.swap
        assert code == 1 and report["not_checked"] == []
        assert [o["module"] for o in report["would_break"]] == [OPS]
        assert "uses the pre-C++11 C++ ABI, torch 2.6.0 the C++11 one" \
            in report["would_break"][0]["line"]

    def test_promote_refused_before_the_build(self, stages: Stages) -> None:
        code, message = stages.refused
        assert code == 1 and f"cannot promote {TO}" in message and OPS in message

    def test_plan_rebuilds_the_consumer_on_to(self, stages: Stages) -> None:
        assert {s["module"]: (s["action"], s["target"]) for s in stages.plan["steps"]} \
            == {OPS: ("rebuild", NEW_OPS)}
        text = stages.built.read_text()
        assert f"('PyTorch', '{RELEASE}'" in text and "-whl" not in text

    def test_ready_once_built(self, stages: Stages) -> None:
        assert stages.replanned["ready"] is True, stages.replanned
        assert {s["module"]: (s["action"], s["target"]) for s in stages.replanned["steps"]} \
            == {OPS: ("installed", NEW_OPS)}

    def test_promote_switches_what_lmod_loads(self, stages: Stages) -> None:
        code, output = stages.promoted
        assert code == 0, output
        assert loaded(stages.after_promote) >= {f"PyTorch/{RELEASE}", "fakeops/1.0"}
        assert f"PyTorch/{RELEASE}-whl" not in loaded(stages.after_promote)

    def test_rollback_switches_back(self, stages: Stages) -> None:
        code, output = stages.rolled_back
        assert code == 0, output
        assert loaded(stages.after_rollback) >= {f"PyTorch/{RELEASE}-whl", "fakeops/1.0-whl"}
        assert f"PyTorch/{RELEASE}" not in loaded(stages.after_rollback)

    def test_guard_names_the_short_names(self, tree: EasyBuildEnv, stages: Stages) -> None:
        """The swap guards written by the hooks file work in the hierarchy: the consumer on
        FROM refuses TO, naming the module as the user loads it."""
        run = user_loads(tree, f"GCCcore/system fakeops/1.0-whl PyTorch/{RELEASE}")
        assert run.returncode != 0
        message = " ".join(run.stderr.split())
        assert "fakeops/1.0-whl" in message and f"{LEVEL}/" not in message
