"""The rollout plan, its easyconfigs and module defaults on a prepared install path.

Recorded fingerprints and the easyconfigs EasyBuild keeps in each installation are written by
the test; EasyBuild's own parser and writer read and write the easyconfigs. The real eb and
Lmod runs are in test_rollout_stack.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.climain import run
from support.easyconfigtext import easyconfig_text

from torchstack.fingerprint.read import Fingerprint, Link, TorchFacts, abi_tag
from torchstack.guards.record import write_fingerprint
from torchstack.guards.scan import scan_installpath
from torchstack.rollout.defaults import Default, write_defaults
from torchstack.rollout.plan import (
    Step,
    derive_suffix,
    plan_rollout,
    same_version,
    target_module,
)

PREFIX = "torchstack: error: "
WHEEL, SOURCE = "PyTorch/2.6.0-whl", "PyTorch/2.6.0"
OPS, DATA, VISION, BARE = "fakeops/1.0-whl", "fakedata/1.0-whl", "vision/0.1-whl", "bare/1.0-whl"


def provider(cxx11: bool) -> Fingerprint:
    torch = TorchFacts("2.6.0", "cpu", cxx11, None, None)
    return Fingerprint("provider", "torch", "2.6.0+cpu", torch, None, None, None,
                       abi_tag("provider", None, torch))


def consumer(name: str, link: Link, cxx11: bool | None) -> Fingerprint:
    torch = TorchFacts("2.6.0" if link != "python" else None, "cpu", cxx11, None, None)
    libraries = ("libc10.so", "libtorch_cpu.so") if link == "cxx" else ()
    return Fingerprint("consumer", name, "1.0", torch, link, "", None,
                       abi_tag("consumer", link, torch), libraries)


def easyconfig(name: str, version: str, suffix: str, deps: list[tuple[str, ...]],
               sources: str = "SOURCE_TAR_GZ") -> str:
    return easyconfig_text(name, version, easyblock="PythonPackage", versionsuffix=suffix,
                           moduleclass="ai", body=f"""\
        sources = [{sources}]
        dependencies = {[('Python', '3.12.3'), *deps]!r}
        """)


def install(root: Path, module: str, found: Fingerprint | None, loads: tuple[str, ...],
            recipe: str | None) -> None:
    """A Lua module file that loads `loads`, its installation with record and easyconfig."""
    name, _, version = module.partition("/")
    path = root / "modules" / "all" / name / f"{version}.lua"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'depends_on("{m}")\n' for m in loads))
    software = root / "software" / name / version
    (software / "easybuild").mkdir(parents=True)
    if found is not None:
        write_fingerprint(software, found)
    if recipe is not None:
        (software / "easybuild" / f"{name}-{version}.eb").write_text(recipe)


@pytest.fixture
def installpath(tmp_path: Path) -> Path:
    """Wheel and source PyTorch 2.6.0 (pre-C++11 and C++11) and the wheel stack's consumers:
    a C++ extension, a Python package on top of it, a prebuilt C++ wheel, one without an
    easyconfig."""
    root = tmp_path / "easybuild"
    install(root, "Python/3.12.3", None, (), None)
    install(root, WHEEL, provider(False), ("Python/3.12.3",),
            easyconfig("PyTorch", "2.6.0", "-whl", []))
    install(root, SOURCE, provider(True), ("Python/3.12.3",),
            easyconfig("PyTorch", "2.6.0", "", []))
    install(root, OPS, consumer("fakeops", "cxx", False), (WHEEL,),
            easyconfig("fakeops", "1.0", "-whl", [("PyTorch", "2.6.0", "-whl")]))
    install(root, DATA, consumer("fakedata", "python", None), (OPS,),
            easyconfig("fakedata", "1.0", "-whl", [("fakeops", "1.0", "-whl")]))
    install(root, VISION, consumer("vision", "cxx", False), (WHEEL,),
            easyconfig("vision", "0.1", "-whl", [("PyTorch", "2.6.0", "-whl")],
                       sources="['vision-0.1-cp312-cp312-linux_x86_64.whl']"))
    install(root, BARE, consumer("bare", "python", None), (WHEEL,), None)
    return root


def _step(installpath: Path, module: str) -> Step:
    plan = plan_rollout(scan_installpath(installpath), WHEEL, SOURCE)
    return next(s for s in plan.steps if s.module == module)


class TestDeriveSuffix:
    @pytest.mark.parametrize(("own", "source", "target", "ending", "expected"), [
        ("-whl", "-whl", "", None, ""),  # upstream's naming: the -whl suffix dropped
        ("-CUDA-12.8.0-whl", "-CUDA-12.8.0-whl", "-CUDA-12.8.0", None, "-CUDA-12.8.0"),
        ("-PyTorch-2.6.0-whl", "-whl", "", None, "-PyTorch-2.6.0"),
        ("", "-whl", "", None, None),  # nothing tells them apart
        ("", "-whl", "", "-src", "-src"),  # the site's own ending
        ("-whl", "-whl", "", "-whl", None),  # an ending that changes nothing
    ], ids=["whl", "cuda", "inner", "no-suffix", "ending", "same"])
    def test_derive(self, own: str, source: str, target: str, ending: str | None,
                    expected: str | None) -> None:
        assert derive_suffix(own, source, target, ending) == expected

    def test_target_module(self) -> None:
        assert target_module("fakeops/1.0-foss-2024a-whl", "-whl", "") == "fakeops/1.0-foss-2024a"
        assert target_module("fakeops/1.0", "", "-src") == "fakeops/1.0-src"


class TestSameVersion:
    @pytest.mark.parametrize(("left", "right", "expected"), [
        ("0.21.0+cpu", "0.21.0", True),  # a wheel's local tag
        ("0.21.0+cpu", "0.21.0a0+git1234", True),  # a source build's version
        ("0.21.0", "0.21.1", False),
        ("not a version", "not a version", True),
        ("not a version", "0.21.0", False),
    ], ids=["local", "source-build", "other", "invalid-same", "invalid-other"])
    def test_same_version(self, left: str, right: str, expected: bool) -> None:
        assert same_version(left, right) is expected


class TestPlan:
    def test_actions(self, installpath: Path) -> None:
        plan = plan_rollout(scan_installpath(installpath), WHEEL, SOURCE)
        steps = {s.module: (s.action, s.target) for s in plan.steps}
        assert steps == {
            OPS: ("rebuild", "fakeops/1.0"),
            DATA: ("reinstall", "fakedata/1.0"),
            VISION: ("blocked", "vision/0.1"),
            BARE: ("blocked", None),
        }
        reasons = {s.module: s.reason for s in plan.steps}
        assert "pre-C++11 C++ ABI" in reasons[OPS]
        assert "prebuilt wheels" in reasons[VISION]
        assert "no easyconfig in" in reasons[BARE]
        assert not plan.ready

    def test_build_order_and_switched_dependencies(self, installpath: Path) -> None:
        from torchstack.rollout.recipes import switched

        plan = plan_rollout(scan_installpath(installpath), WHEEL, SOURCE)
        order = [s.module for s in plan.to_build()]
        assert order == [OPS, DATA]  # fakedata loads fakeops: built after it
        step = plan.to_build()[1]
        assert step.recipe is not None and step.suffix is not None
        name, text = switched(step.recipe, step.suffix, plan.replacements())
        assert name == "fakedata-1.0.eb"
        assert "('fakeops', '1.0')" in text and "-whl" not in text

    def test_consumer_of_a_blocked_consumer_is_blocked(self, installpath: Path) -> None:
        install(installpath, "visiondata/1.0-whl", consumer("visiondata", "python", None),
                (VISION,), easyconfig("visiondata", "1.0", "-whl", [("vision", "0.1", "-whl")]))
        step = _step(installpath, "visiondata/1.0-whl")
        assert step.action == "blocked"
        assert step.reason.startswith(f"it loads {VISION}, blocked itself; compatible")

    def test_installed_only_when_recorded_and_compatible(self, installpath: Path) -> None:
        install(installpath, "fakeops/1.0", consumer("fakeops", "cxx", False), (SOURCE,), None)
        step = _step(installpath, OPS)
        assert step.action == "rebuild"  # built with the wrong ABI
        write_fingerprint(installpath / "software" / "fakeops" / "1.0",
                          consumer("fakeops", "cxx", True))
        step = _step(installpath, OPS)
        assert (step.action, step.target) == ("installed", "fakeops/1.0")


class TestCli:
    def test_plan_writes_easyconfigs_and_easystack(self, installpath: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
        out = tmp_path / "out"
        code, stdout, _ = run(["rollout", "plan", str(installpath), WHEEL, SOURCE,
                               "--out", str(out)], capsys)
        assert code == 1  # not ready
        stack = (out / "easystack-rollout-PyTorch-2.6.0.yaml").read_text()
        assert stack.index("fakeops-1.0.eb") < stack.index("fakedata-1.0.eb")
        assert "eb --easystack" in stdout and "--job" in stdout
        assert f"  {VISION} -> vision/0.1: incompatible" in stdout
        code, _, err = run(["rollout", "plan", str(installpath), WHEEL, SOURCE,
                            "--out", str(out)], capsys)
        assert code == 2 and err.startswith(PREFIX) and "--force" in err
        assert err.count("\n") == 1

    def test_promote_refused_with_what_is_missing(self, installpath: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run(["rollout", "promote", str(installpath), WHEEL, SOURCE], capsys)
        assert code == 1
        for module in (OPS, DATA, VISION, BARE):
            assert module in err
        assert not (installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua").exists()

    @pytest.mark.parametrize(("source", "target", "fragment"), [
        (WHEEL, WHEEL, "the same module"),
        (OPS, SOURCE, "is a consumer"),
        (WHEEL, "PyTorch/9.9", "not installed"),
    ], ids=["same", "consumer", "missing"])
    def test_bad_input(self, installpath: Path, capsys: pytest.CaptureFixture[str],
                       source: str, target: str, fragment: str) -> None:
        code, _, err = run(["rollout", "plan", str(installpath), source, target], capsys)
        assert code == 2 and err.startswith(PREFIX) and fragment in err
        assert err.count("\n") == 1

    def test_damaged_easyconfig(self, installpath: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
        """A consumer's: that consumer is blocked; FROM's: the plan is refused in one line."""
        (installpath / "software" / "fakeops" / "1.0-whl" / "easybuild"
         / "fakeops-1.0-whl.eb").write_text("name = 'fakeops\n")
        assert _step(installpath, OPS).reason.startswith("EasyBuild cannot read")
        (installpath / "software" / "PyTorch" / "2.6.0-whl" / "easybuild"
         / "PyTorch-2.6.0-whl.eb").write_text("dependencies = [\n")
        code, _, err = run(["rollout", "plan", str(installpath), WHEEL, SOURCE], capsys)
        assert code == 2 and err.startswith(f"{PREFIX}{WHEEL}: EasyBuild cannot read")
        assert err.count("\n") == 1

    def test_out_is_a_file(self, installpath: Path, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_path / "file").write_text("")
        code, _, err = run(["rollout", "plan", str(installpath), WHEEL, SOURCE,
                            "--out", str(tmp_path / "file")], capsys)
        assert code == 2 and err.startswith(PREFIX) and "not a folder" in err

    def test_other_release_refused(self, installpath: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
        torch = TorchFacts("2.7.0", "cpu", True, None, None)
        install(installpath, "PyTorch/2.7.0", Fingerprint(
            "provider", "torch", "2.7.0+cpu", torch, None, None, None,
            abi_tag("provider", None, torch)), (), easyconfig("PyTorch", "2.7.0", "", []))
        code, _, err = run(["rollout", "plan", str(installpath), WHEEL, "PyTorch/2.7.0"],
                           capsys)
        assert code == 2 and "same release" in err


class TestDefaults:
    def test_lua_block_keeps_site_lines(self, installpath: Path) -> None:
        rc = installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua"
        rc.write_text('hide_version("PyTorch/2.6.0-whl")\n')
        write_defaults(installpath, [Default(SOURCE, "2.6.0")])
        write_defaults(installpath, [Default(WHEEL, "2.6.0")])
        text = rc.read_text()
        assert text.startswith('hide_version("PyTorch/2.6.0-whl")\n')
        assert text.count("module_version") == 1  # the block replaced, not added again
        assert f'module_version("{WHEEL}", "default")' in text

    def test_release_alias_where_no_module_has_it(self, installpath: Path) -> None:
        install(installpath, "PyTorch/2.6.0-foss-2024a", None, (), None)
        write_defaults(installpath, [Default("PyTorch/2.6.0-foss-2024a", "2.6.0")])
        text = (installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua").read_text()
        assert 'module_version("PyTorch/2.6.0-foss-2024a", "default")' in text
        assert "\"2.6.0\")" not in text  # PyTorch/2.6.0 is a module file of its own here
        write_defaults(installpath, [Default("fakeops/1.0-whl", "1.0")])
        text = (installpath / "modules" / "all" / "fakeops" / ".modulerc.lua").read_text()
        assert 'module_version("fakeops/1.0-whl", "1.0")' in text

    def test_tcl_tree_gets_modulerc(self, tmp_path: Path) -> None:
        folder = tmp_path / "modules" / "all" / "PyTorch"
        folder.mkdir(parents=True)
        (folder / "2.6.0").write_text("#%Module\n")
        write_defaults(tmp_path, [Default("PyTorch/2.6.0")])
        assert (folder / ".modulerc").read_text().splitlines()[0] == "#%Module"
        assert 'module-version "PyTorch/2.6.0" "default"' in (folder / ".modulerc").read_text()

    def test_competing_default_refused(self, installpath: Path) -> None:
        from torchstack.rollout.plan import RolloutError

        version = installpath / "modules" / "all" / "PyTorch" / ".version"
        version.write_text('#%Module\nset ModulesVersion "2.6.0-whl"\n')
        with pytest.raises(RolloutError, match=r"\.version.*sets a default of its own"):
            write_defaults(installpath, [Default(SOURCE)])
        assert not (version.parent / ".modulerc.lua").exists()



class TestCliInputs:
    @pytest.mark.parametrize("argv", [["--suffix", "-src"], ["--suffix=-src"]],
                             ids=["separate", "joined"])
    def test_dashed_suffix(self, installpath: Path, capsys: pytest.CaptureFixture[str],
                           argv: list[str]) -> None:
        code, stdout, err = run(["rollout", "plan", str(installpath), WHEEL, SOURCE, *argv],
                                capsys)
        assert code == 1, err  # not ready, but planned
        assert f"{OPS} -> fakeops/1.0-src" in stdout

    def test_rollback_with_to_gone(self, installpath: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
        """Rollback needs FROM only: TO's installation removed, its module file left."""
        import shutil

        shutil.rmtree(installpath / "software" / "PyTorch" / "2.6.0")
        code, stdout, err = run(["rollout", "rollback", str(installpath), WHEEL, SOURCE], capsys)
        assert code == 0, err
        rc = installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua"
        assert f'module_version("{WHEEL}", "default")' in rc.read_text()
        assert f"rolled back to {WHEEL}" in stdout

    @pytest.mark.parametrize("kind", ["latin-1", "fifo"])
    def test_kept_easyconfig_unreadable(self, installpath: Path, kind: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        """FROM's easyconfig not UTF-8 or a FIFO: one line, exit 2; a consumer's: blocked."""
        import os

        kept = installpath / "software" / "fakeops" / "1.0-whl" / "easybuild"
        source = installpath / "software" / "PyTorch" / "2.6.0-whl" / "easybuild"
        for folder, name in ((kept, "fakeops-1.0-whl.eb"), (source, "PyTorch-2.6.0-whl.eb")):
            (folder / name).unlink()
            if kind == "fifo":
                os.mkfifo(folder / name)
            else:
                (folder / name).write_bytes(b"description = 'caf\xe9'\n")
            if folder == kept:
                reason = _step(installpath, OPS).reason
                assert reason.startswith("no easyconfig" if kind == "fifo" else
                                         f"{str(folder / name)!r} is not UTF-8 text (byte 18 "
                                         f"is 0xe9)"), reason
        code, _, err = run(["rollout", "plan", str(installpath), WHEEL, SOURCE], capsys)
        assert code == 2 and err.startswith(f"{PREFIX}{WHEEL}: ") and err.count("\n") == 1
        assert ("not UTF-8" if kind == "latin-1" else "no easyconfig") in err


class TestModuleTreeAsLmodSeesIt:
    """Loads that reach FROM through a symbolic version, module folders that are symlinks:
    the consumers behind them are in the plan, never silently left out."""

    def test_consumer_loading_from_through_a_symbolic_version(self, installpath: Path) -> None:
        folder = installpath / "modules" / "all" / "PyTorch"
        (folder / ".modulerc.lua").write_text(f'module_version("{WHEEL}", "wheels")\n')
        install(installpath, "aliasuser/1.0-whl", consumer("aliasuser", "python", None),
                ("PyTorch/wheels",), easyconfig("aliasuser", "1.0", "-whl",
                                                [("PyTorch", "2.6.0", "-whl")]))
        assert _step(installpath, "aliasuser/1.0-whl").action == "reinstall"

    def test_symlinked_module_folder(self, installpath: Path, tmp_path: Path) -> None:
        install(installpath, "linked/1.0-whl", consumer("linked", "cxx", False), (WHEEL,),
                easyconfig("linked", "1.0", "-whl", [("PyTorch", "2.6.0", "-whl")]))
        shared = tmp_path / "shared-modules" / "linked"
        folder = installpath / "modules" / "all" / "linked"
        shared.parent.mkdir()
        folder.rename(shared)
        folder.symlink_to(shared)
        assert _step(installpath, "linked/1.0-whl").action == "rebuild"
