"""The replacements inside EasyBuild, made only on the releases they were tested with
(torchstack.install.ebversions): on, off (EasyBuild's own function as it is, one log line), and
the list against the installed EasyBuild and the oldest one setup.cfg admits."""

from __future__ import annotations

import configparser
import importlib.metadata
import logging
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from easybuild.easyblocks.generic import pythonbundle
from easybuild.framework import easyblock
from easybuild.tools import filetools
from packaging.requirements import Requirement

from torchstack.install import ebversions, permissions, pthsearch, steps
from torchstack.install.ebversions import PERMISSIONS, PTHSEARCH, Replacement

SETUP_CFG = Path(__file__).resolve().parents[2] / "setup.cfg"
REPLACEMENTS = [PERMISSIONS, PTHSEARCH]


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    """A stand-in for the easyblock's logger, its lines in caplog."""
    caplog.set_level(logging.INFO, logger="test-ebversions")
    return logging.getLogger("test-ebversions")


@pytest.fixture
def untested(monkeypatch: pytest.MonkeyPatch) -> str:
    """An EasyBuild release no replacement was tested with, installed as far as they can tell."""
    monkeypatch.setattr(ebversions, "installed", lambda package: "5.3.0")
    return "5.3.0"


def _oldest_admitted(package: str) -> str:
    """The lower bound setup.cfg's install_requires sets on `package`, as a release."""
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    for line in config["options"]["install_requires"].splitlines():
        requirement = Requirement(line.split("#")[0].strip()) if line.strip() else None
        if requirement is not None and requirement.name == package:
            (bound,) = [s.version for s in requirement.specifier if s.operator == ">="]
            return ".".join([*bound.split("."), "0", "0"][:3])
    raise AssertionError(f"setup.cfg does not require {package}")


class TestInstalled:
    @pytest.mark.parametrize("package", sorted(ebversions.VERSION_MODULES))
    def test_as_pip_knows_it(self, package: str) -> None:
        assert ebversions.installed(package) == importlib.metadata.version(package)

    def test_permissions_tested_on_this_release(self) -> None:
        release = ebversions.installed(PERMISSIONS.package)
        assert release in PERMISSIONS.tested, (
            f"{PERMISSIONS.package} {release} is installed: run test_permissions.py and "
            "test_easyblock_wheels.py under it and add it to ebversions.PERMISSIONS")

    def test_pthsearch_tested_where_pythonbundle_searches(self) -> None:
        # listed exactly on releases whose PythonBundle has the name it replaces
        release = ebversions.installed(PTHSEARCH.package)
        assert (release in PTHSEARCH.tested) == hasattr(pythonbundle, "search_file"), (
            f"{PTHSEARCH.package} {release} is installed: run test_pthsearch.py and "
            "test_easyblock_wheels.py under it and list it in ebversions.PTHSEARCH if its "
            "PythonBundle searches for .pth files with search_file")

    def test_oldest_admitted_release_is_tested(self) -> None:
        # CI runs the real eb under it too (scripts/test): install_requires is a tested claim
        assert _oldest_admitted(PERMISSIONS.package) in PERMISSIONS.tested


class TestGate:
    @pytest.mark.parametrize("replacement", REPLACEMENTS)
    def test_on_for_a_tested_release(self, replacement: Replacement, log: logging.Logger,
                                     caplog: pytest.LogCaptureFixture,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ebversions, "installed", lambda package: replacement.tested[-1])
        assert ebversions.fallback(replacement) is None
        assert ebversions.replacing(replacement, log)
        assert caplog.records == []

    @pytest.mark.parametrize("replacement", REPLACEMENTS)
    def test_off_for_any_other_release(self, replacement: Replacement, log: logging.Logger,
                                       caplog: pytest.LogCaptureFixture, untested: str) -> None:
        assert not ebversions.replacing(replacement, log)
        assert [r.getMessage() for r in caplog.records] == [
            f"torchstack: EasyBuild's own {replacement.what} runs: {replacement.package} "
            f"{untested} is not a release it was tested with ({', '.join(replacement.tested)})"]

    def test_a_development_release_is_another_release(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ebversions, "installed", lambda package: "5.4.1.dev0")
        assert ebversions.fallback(PERMISSIONS) is not None


class TestPermissionsOff:
    def test_easybuilds_own_function_as_it_is(self, tmp_path: Path, log: logging.Logger,
                                              caplog: pytest.LogCaptureFixture,
                                              untested: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
        # no eb configuration here: the one build option EasyBuild's function reads
        monkeypatch.setattr(filetools, "build_option", lambda name: 0.5)
        original = easyblock.adjust_permissions
        (tmp_path / "file").write_text("")
        with permissions.read_once(log) as replaced:
            assert easyblock.adjust_permissions is original
            easyblock.adjust_permissions(str(tmp_path), stat.S_IWOTH, add=True)
        assert not replaced
        assert easyblock.adjust_permissions is original
        assert (tmp_path / "file").stat().st_mode & stat.S_IWOTH  # EasyBuild's own did it
        assert len(caplog.records) == 1 and untested in caplog.records[0].getMessage()

    def test_the_step_says_so_once(self, log: logging.Logger, caplog: pytest.LogCaptureFixture,
                                   untested: str) -> None:
        seen = []
        block = SimpleNamespace(log=log)
        steps.adjust_permissions(block, lambda: seen.append(easyblock.adjust_permissions))
        assert seen == [easyblock.adjust_permissions]  # the step ran with EasyBuild's own
        messages = [r.getMessage() for r in caplog.records]
        assert messages[0] == ebversions.fallback(PERMISSIONS)
        assert messages[1].startswith("torchstack: permissions step, EasyBuild's own, took ")
        assert len(messages) == 2

    def test_on_the_step_reads_once(self, log: logging.Logger, caplog: pytest.LogCaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ebversions, "installed", lambda package: PERMISSIONS.tested[-1])
        seen = []
        block = SimpleNamespace(log=log)
        steps.adjust_permissions(block, lambda: seen.append(easyblock.adjust_permissions))
        assert seen[0] is not easyblock.adjust_permissions  # replaced for the step only
        (message,) = [r.getMessage() for r in caplog.records]
        assert message.startswith("torchstack: permissions step, reading the installation once")


class TestPthSearchOff:
    def test_no_store_and_one_line(self, log: logging.Logger, caplog: pytest.LogCaptureFixture,
                                   untested: str) -> None:
        # PyTorchWheels asks once, at the sanity check; without a store its make_module_extra
        # is PythonBundle's own, as it is
        assert pthsearch.store(log) is None
        assert [r.getMessage() for r in caplog.records] == [ebversions.fallback(PTHSEARCH)]

    def test_on_an_empty_store(self, log: logging.Logger, caplog: pytest.LogCaptureFixture,
                               monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ebversions, "installed", lambda package: PTHSEARCH.tested[-1])
        assert pthsearch.store(log) == {}
        assert caplog.records == []
