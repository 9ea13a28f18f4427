"""markers: Requires-Dist lines parsed leniently and evaluated for a target or an interpreter."""

from __future__ import annotations

import logging
import platform

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from torchstack import markers

X86 = markers.for_target("3.13", "x86_64")
ARM = markers.for_target("3.13", "aarch64")


class TestParse:
    def test_valid(self) -> None:
        requirement = markers.parse('sympy>=1.13.3; python_version >= "3.9"', "torch 2.9.1")
        assert requirement is not None
        assert requirement.name == "sympy"

    def test_unparsable_is_skipped_and_logged(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.DEBUG, logger="torchstack.markers"):
            assert markers.parse("torch (>= 2", "demo 1.0") is None
        assert "demo 1.0: ignoring unparsable Requires-Dist 'torch (>= 2'" in caplog.text


class TestForTarget:
    def test_every_variable_set(self) -> None:
        # nothing of the host leaks into a target's evaluation
        assert set(default_environment()) <= set(X86)

    @pytest.mark.parametrize(("line", "on_x86", "on_arm"), [
        ('nvidia-nccl-cu12==2.27.5; platform_system == "Linux" and '
         'platform_machine == "x86_64"', True, False),
        ('triton==3.5.1; python_version < "3.14"', True, True),
        ('pywin32; sys_platform == "win32"', False, False),
        ("filelock", True, True),  # no marker
    ], ids=["arch", "python", "windows", "unmarked"])
    def test_evaluation(self, line: str, on_x86: bool, on_arm: bool) -> None:
        requirement = Requirement(line)
        assert markers.applies(requirement, X86) is on_x86
        assert markers.applies(requirement, ARM) is on_arm

    def test_python_version(self) -> None:
        requirement = Requirement('triton==3.5.1; python_version < "3.14"')
        assert not markers.applies(requirement, markers.for_target("3.14", "x86_64"))


class TestExtras:
    def test_marked_for_an_extra(self) -> None:
        requirement = Requirement("nvidia-cublas==13.1.1.3.*; extra == 'cublas'")
        assert not markers.applies(requirement, X86)
        assert markers.applies(requirement, X86, ("", "cublas"))

    def test_unmarked_only_for_the_project_itself(self) -> None:
        requirement = Requirement("filelock")
        assert markers.applies(requirement, X86, ("", "cublas"))
        assert not markers.applies(requirement, X86, ("cublas",))


class TestForInterpreter:
    def test_python_version_overridden(self) -> None:
        requirement = Requirement('tomli; python_version < "3.11"')
        assert markers.applies(requirement, markers.for_interpreter("3.10"))
        assert not markers.applies(requirement, markers.for_interpreter("3.12"))

    def test_rest_from_this_host(self) -> None:
        requirement = Requirement(f'demo; platform_machine == "{platform.machine()}"')
        assert markers.applies(requirement, markers.for_interpreter("3.12"))
