"""PyTorchWheels with a toolchain that has a C++ compiler: a torch C++ extension is built
with it at sanity check, beside EasyBuild's own checks, and a compiler that builds for the
other C++ ABI fails the installation."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from support.ebenv import EasyBuildEnv, wheel_easyconfig, write_gcccore_toolchain
from support.extension_src import write_old_abi_compiler
from support.wheelbuild import sha256

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
    assert re.search(r"torchstack: C\+\+ extension build took [\d.]+ s, waited for [\d.]+ s",
                     log)


def test_compiler_for_the_other_cxx_abi_fails_the_install(
    eb_env: EasyBuildEnv, real_wheel: Factory, tmp_path: Path
) -> None:
    # a site's g++ that builds for the old C++ ABI whatever torch asks: the check must fail,
    # with the loader's message, and nothing is left installed
    bindir = tmp_path / "bin"
    bindir.mkdir()
    write_old_abi_compiler(bindir / "g++")
    env = EasyBuildEnv(tmp_path / "eb", eb_env.python_root).setup()
    gcc = write_gcccore_toolchain(env, bindir)
    wheel = real_wheel("torch-2.13.0")
    env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(
        env.root / f"PyTorch-2.13.0-GCCcore-{gcc}-whl.eb", "PyTorch", "2.13.0",
        [("torch", "2.13.0+cpu", wheel, sha256(wheel))],
        toolchain=f"{{'name': 'GCCcore', 'version': '{gcc}'}}",
    )
    result = env.eb(easyconfig)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "torchstack: a C++ extension does not build against torch with this toolchain" \
        in output, output[-3000:]
    assert "Could not load this library" in output
    assert not (env.installpath / "modules/all/PyTorch" / f"2.13.0-GCCcore-{gcc}-whl.lua").exists()
