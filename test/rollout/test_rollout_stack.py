"""`torchstack rollout` end to end: the real eb builds the plan's easystack, real Lmod loads the
defaults it writes.

Each install path holds a "wheel" PyTorch/2.6.0-whl and a source-built PyTorch/2.6.0 of the same
release (the small libtorch of test/support/fakelibtorch.py, built by the stage-2 easyblock), and
two consumers built on the wheel module: fakeops (a C++ extension) and faketoy (pure Python).
- pre-2.7: the wheel module uses the pre-C++11 ABI, as official wheels before 2.7 did: fakeops
  must be rebuilt, faketoy runs on the source build as it is;
- same-abi: both use the C++11 ABI (2.6's cu126 wheels did): no consumer needs a rebuild.
In both, every consumer gets a module on the source stack before the defaults move, rollback
moves them back, and a user with the wheel stack loaded is still guarded.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.ebenv import EasyBuildEnv
from support.fakelibtorch import (
    RELEASE,
    consumer_easyconfig,
    consumer_source,
    run_eb,
    torch_easyconfig,
    torch_source,
    toy_source,
    write_blas_module,
)
from support.wheelbuild import sha256

from torchstack.cli import main

WHEEL, SOURCE = f"PyTorch/{RELEASE}-whl", f"PyTorch/{RELEASE}"
OPS, TOY = "fakeops/1.0-whl", "faketoy/1.0-whl"
NEW_OPS, NEW_TOY = "fakeops/1.0", "faketoy/1.0"
# The C++ ABI flag of the wheel module and of the source build, per case.
CASES = {"pre-2.7": ("0", "1"), "same-abi": ("1", "1")}
CALL_OPS = "import fakeops; assert fakeops.schema('add') == 'aten::add', fakeops.schema('add')"
CALL_TOY = "import faketoy; assert faketoy.shout('mul') == 'ATEN::MUL'"
RUNS = f"python -c {shlex.quote(CALL_OPS)}\npython -c {shlex.quote(CALL_TOY)}"


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _install(env: EasyBuildEnv, easyconfig: Path) -> None:
    code, output = run_eb(env, str(easyconfig))
    assert code == 0, output


@pytest.fixture(scope="module", params=sorted(CASES))
def stack(request: pytest.FixtureRequest, eb_env: EasyBuildEnv,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[str, EasyBuildEnv]:
    """An install path of its own per case (the rollout adds modules to it), same Python."""
    case = request.param
    env = EasyBuildEnv(tmp_path_factory.mktemp(f"rollout-{case}"), eb_env.python_root).setup()
    write_blas_module(env.site_modules)
    sources = {"PyTorch": torch_source(env.root), "fakeops": consumer_source(env.root),
               "faketoy": toy_source(env.root)}
    for software, tarball in sources.items():
        env.stage_source(software, tarball)
    torch = sources["PyTorch"]
    for suffix, abi in zip(("-whl", ""), CASES[case]):
        _install(env, torch_easyconfig(env.root / f"PyTorch-{RELEASE}{suffix}.eb", suffix,
                                       torch, sha256(torch), (f"_GLIBCXX_USE_CXX11_ABI={abi}",)))
    for name in ("fakeops", "faketoy"):
        _install(env, consumer_easyconfig(env.root / f"{name}-1.0-whl.eb", name, "-whl",
                                          sources[name], sha256(sources[name]), "-whl"))
    return case, env


@dataclass(frozen=True)
class Rollout:
    """What each stage of the rollout answered, in order."""

    case: str
    env: EasyBuildEnv
    out: Path
    plan: dict[str, Any]
    plan_code: int
    refused: tuple[int, str]
    built: tuple[int, str]
    replanned: dict[str, Any]
    promoted: tuple[int, str]

    def steps(self, plan: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {s["module"]: (s["action"], s["target"]) for s in plan["steps"]}


@pytest.fixture(scope="module")
def rollout(stack: tuple[str, EasyBuildEnv], tmp_path_factory: pytest.TempPathFactory
            ) -> Rollout:
    """plan --out, promote (refused), eb --easystack of the plan, plan again, promote."""
    case, env = stack
    where = str(env.installpath)
    out = tmp_path_factory.mktemp(f"rollout-out-{case}") / "easyconfigs"
    code, text, _ = _cli("rollout", "plan", where, WHEEL, SOURCE, "--out", str(out), "--json")
    refused_code, _, refusal = _cli("rollout", "promote", where, WHEEL, SOURCE)
    stack_file = next(out.glob("easystack-*.yaml"))
    built = run_eb(env, "--easystack", stack_file.name, f"--robot={out}", cwd=out)
    _, again, _ = _cli("rollout", "plan", where, WHEEL, SOURCE, "--json")
    promoted_code, promoted, _ = _cli("rollout", "promote", where, WHEEL, SOURCE)
    return Rollout(case, env, out, json.loads(text), code, (refused_code, refusal), built,
                   json.loads(again), (promoted_code, promoted))


class TestPlan:
    def test_groups_with_reasons(self, rollout: Rollout) -> None:
        steps = {s["module"]: s for s in rollout.plan["steps"]}
        expected = {"pre-2.7": {OPS: "rebuild", TOY: "reinstall"},
                    "same-abi": {OPS: "reinstall", TOY: "reinstall"}}[rollout.case]
        assert {m: s["action"] for m, s in steps.items()} == expected
        assert (steps[OPS]["target"], steps[TOY]["target"]) == (NEW_OPS, NEW_TOY)
        assert rollout.plan_code == 1 and rollout.plan["ready"] is False
        if rollout.case == "pre-2.7":
            assert "fakeops 1.0 uses the pre-C++11 C++ ABI, torch 2.6.0 the C++11 one" \
                in steps[OPS]["reason"]
        else:
            assert "links libtorch torch-2.6.0-cxx11-cpu" in steps[OPS]["reason"]
        assert "only imports torch" in steps[TOY]["reason"]

    def test_easyconfigs_switched_to_the_source_module(self, rollout: Rollout) -> None:
        text = (rollout.out / "fakeops-1.0.eb").read_text()
        assert "versionsuffix" not in text  # the -whl suffix replaced by the source's none
        assert f"('PyTorch', '{RELEASE}')" in text and "-whl" not in text
        stack = next(rollout.out.glob("easystack-*.yaml")).read_text()
        assert stack.index("fakeops-1.0.eb") > 0 and "faketoy-1.0.eb" in stack

    def test_promotion_refused_before_the_build(self, rollout: Rollout) -> None:
        code, message = rollout.refused
        assert code == 1
        assert f"cannot promote {SOURCE}" in message
        assert OPS in message and TOY in message

    def test_easystack_builds_with_real_eb(self, rollout: Rollout) -> None:
        code, output = rollout.built
        assert code == 0, output

    def test_ready_from_recorded_fingerprints(self, rollout: Rollout) -> None:
        assert rollout.replanned["ready"] is True
        assert rollout.steps(rollout.replanned) == {OPS: ("installed", NEW_OPS),
                                                    TOY: ("installed", NEW_TOY)}


class TestDefaults:
    def test_promote_writes_lmod_defaults(self, rollout: Rollout) -> None:
        code, output = rollout.promoted
        assert code == 0, output
        rc = rollout.env.installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua"
        assert f'module_version("{SOURCE}", "default")' in rc.read_text()

    def test_defaults_load_the_source_stack_that_runs(self, rollout: Rollout) -> None:
        run = rollout.env.shell(f"module load fakeops faketoy\n{RUNS}\n"
                                "echo LOADED=$LOADEDMODULES")
        assert run.returncode == 0, run.stderr
        loaded = run.stdout.split("LOADED=")[1].split()[0].split(":")
        assert {SOURCE, NEW_OPS, NEW_TOY} <= set(loaded)
        assert WHEEL not in loaded

    def test_loaded_wheel_stack_stays_guarded(self, rollout: Rollout) -> None:
        """A user with the wheel stack loaded: `module load PyTorch` now means the source
        build; the guard refuses it under the pre-C++11 extension, allows it otherwise."""
        run = rollout.env.shell(f"module load {OPS}\nmodule load PyTorch\n"
                                f"python -c {shlex.quote(CALL_OPS)}")
        if rollout.case == "pre-2.7":
            assert run.returncode != 0
            assert OPS in " ".join(run.stderr.split())
        else:
            assert run.returncode == 0, run.stderr

    def test_rollback_and_promote_again(self, rollout: Rollout) -> None:
        where = str(rollout.env.installpath)
        code, output, _ = _cli("rollout", "rollback", where, WHEEL, SOURCE)
        assert code == 0, output
        run = rollout.env.shell(f"module load fakeops faketoy\n{RUNS}\n"
                                "echo LOADED=$LOADEDMODULES")
        assert run.returncode == 0, run.stderr
        assert {WHEEL, OPS, TOY} <= set(run.stdout.split("LOADED=")[1].split()[0].split(":"))
        code, output, _ = _cli("rollout", "promote", where, WHEEL, SOURCE)
        assert code == 0, output
        run = rollout.env.shell("module load PyTorch\necho ABI=$TORCHSTACK_TORCH_ABI")
        assert run.returncode == 0 and "ABI=torch-2.6.0-cxx11-cpu" in run.stdout, run.stderr
