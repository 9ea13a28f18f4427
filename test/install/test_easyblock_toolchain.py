"""PyTorchWheels with a toolchain that has a C++ compiler: a torch C++ extension is built
with it at sanity check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ebenv import EasyBuildEnv, wheel_easyconfig, write_gcccore_toolchain
from wheelbuild import sha256

from torchstack.install.jitcheck import SUCCESS

Factory = Callable[[str], Path]


def test_cxx_extension_check_with_toolchain_compiler(
    eb_env: EasyBuildEnv, real_wheel: Factory
) -> None:
    gcc = write_gcccore_toolchain(eb_env)
    wheel = real_wheel("torch-2.13.0")
    eb_env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(
        eb_env.root / f"PyTorch-2.13.0-GCCcore-{gcc}-whl.eb", "PyTorch", "2.13.0",
        [("torch", "2.13.0+cpu", wheel, sha256(wheel))],
        toolchain=f"{{'name': 'GCCcore', 'version': '{gcc}'}}",
    )
    result = eb_env.eb(easyconfig, "--debug")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    log = next((eb_env.installpath / "software/PyTorch" / f"2.13.0-GCCcore-{gcc}-whl"
                / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
    assert "torchstack_jit_check.py" in log
    assert SUCCESS in log
