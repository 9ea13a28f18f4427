"""SitePackage.lua on modules that eb built without guards, with real Lmod.

PyTorch 2.13.0+cpu and the C++ extension built against it are plain PythonBundle easyconfigs
built without the hooks file: their module files carry no guard text. What they have is the
fingerprint file the SitePackage hook reads, recorded afterwards by `torchstack scan
INSTALLPATH --record`, as a site does for modules that predate torchstack. With the
output of `torchstack lmod-sitepackage` on LMOD_PACKAGE_PATH, unsafe swaps and loads are
refused (naming the consumer and both abi tags, changing nothing), safe ones pass, and the
read-only commands still work in an environment that was made inconsistent without it.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.ebmodules import consumer_module, stage_wheels
from support.swapmatrix import assert_refused, forced, recorded_tag, works

from torchstack.cli import main

PLAIN_CPU, PLAIN_EXT = "PyTorch/2.13.0-plain", "torchstack_demo_ext/0.1-plain"
CPU, CUDA = "PyTorch/2.13.0-whl", "PyTorch/2.14.1-CUDA-13.0-whl"  # guarded (conftest)
VISION = "torchvision/0.29.1-whl"  # guarded stable consumer on CUDA (conftest)
CPU_TAG, CUDA_TAG = "torch-2.13.0-cxx11-cpu", "torch-2.14.1-cxx11-cu13"
VISION_TAG = "torch-2.14.0-stable-cu13"  # built against 2.14.0, runs on any newer cu13 torch


@pytest.fixture(scope="session")
def plain_stack(eb_env: EasyBuildEnv, real_wheel: object, demo_ext_wheel: Path) -> list[str]:
    """The unguarded provider and consumer, with their fingerprints recorded afterwards."""
    wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
    easyconfig = wheel_easyconfig(eb_env.root / "PyTorch-2.13.0-plain.eb", "PyTorch", "2.13.0",
                                  stage_wheels(eb_env, "PyTorch", [wheel]),
                                  versionsuffix="-plain", easyblock="PythonBundle")
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    consumer_module(eb_env, demo_ext_wheel, "torchstack_demo_ext", "0.1",
                    [("PyTorch", "2.13.0", "-plain")], suffix="-plain", easyblock="PythonBundle")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["scan", str(eb_env.installpath), "--record"]) == 0
    assert f"recorded {PLAIN_CPU}: {CPU_TAG} in " in out.getvalue()
    assert f"recorded {PLAIN_EXT}: {CPU_TAG} in " in out.getvalue()
    return [PLAIN_CPU, PLAIN_EXT]


@pytest.fixture(scope="session")
def site_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the output of `torchstack lmod-sitepackage` as SitePackage.lua."""
    folder = tmp_path_factory.mktemp("sitepackage")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["lmod-sitepackage"]) == 0
    (folder / "SitePackage.lua").write_text(out.getvalue(), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def stack(plain_stack: list[str], pytorch_cpu_module: str, cuda_wheels_module: str,
          torchvision_stable_module: str) -> list[str]:
    """The unguarded modules and the guarded ones they are mixed with."""
    return [*plain_stack, pytorch_cpu_module, cuda_wheels_module, torchvision_stable_module]


def _with(site_package: Path, script: str) -> str:
    return f"export LMOD_PACKAGE_PATH={site_package}\n{script}"


class TestUnguardedModules:
    def test_no_guard_text_but_recorded(self, eb_env: EasyBuildEnv, stack: list[str]) -> None:
        assert recorded_tag(eb_env, VISION) == VISION_TAG
        for module in (PLAIN_CPU, PLAIN_EXT):
            text = (eb_env.installpath / "modules" / "all" / f"{module}.lua").read_text()
            for guard in ("TORCHSTACK_TORCH_ABI", "TORCHSTACK_CONSUMERS", "LmodError"):
                assert guard not in text
            assert recorded_tag(eb_env, module) == CPU_TAG

    def test_without_sitepackage_the_unsafe_swap_passes_and_breaks(
        self, eb_env: EasyBuildEnv, stack: list[str]
    ) -> None:
        run = eb_env.shell(f"module load {PLAIN_EXT}\nmodule swap {PLAIN_CPU} {CUDA}\n"
                           f"{works('ext')} || echo broken")
        assert run.returncode == 0, run.stderr
        assert "broken" in run.stdout


class TestRefused:
    @pytest.mark.parametrize(("setup", "command", "names"), [
        # the unguarded cxx consumer: its torch swapped, or replaced by a load of another
        (f"module load {PLAIN_EXT}", f"module swap {PLAIN_CPU} {CUDA}",
         (PLAIN_EXT, CPU_TAG, CUDA, CUDA_TAG, f"unload {PLAIN_EXT}")),
        (f"module load {PLAIN_EXT}", f"module load {CUDA}",
         (PLAIN_EXT, CPU_TAG, CUDA, CUDA_TAG, f"unload {PLAIN_EXT}")),
        # a guarded consumer's registration against the unguarded torch (no provider half)
        (f"module load {VISION}", f"module swap {CUDA} {PLAIN_CPU}",
         (VISION, VISION_TAG, PLAIN_CPU, CPU_TAG, f"load {CUDA} or unload {VISION}")),
    ], ids=["unguarded-consumer-swap", "unguarded-consumer-autoswap", "unguarded-provider"])
    def test_refused(self, eb_env: EasyBuildEnv, stack: list[str], site_package: Path,
                     setup: str, command: str, names: tuple[str, ...]) -> None:
        text = assert_refused(eb_env, _with(site_package, setup), command, names)
        assert "torchstack: this command would leave" in text

    @pytest.mark.parametrize(("module", "consumer", "torch"),
                             [(PLAIN_EXT, "ext", CUDA), (VISION, "vision", PLAIN_CPU)],
                             ids=["unguarded-consumer", "unguarded-provider"])
    def test_refusal_is_real(self, eb_env: EasyBuildEnv, stack: list[str], module: str,
                             consumer: str, torch: str) -> None:
        assert forced(eb_env, module, consumer, torch).returncode != 0


class TestAllowed:
    @pytest.mark.parametrize("script", [
        f"module load {PLAIN_EXT}",
        f"module load {PLAIN_EXT}\nmodule swap {PLAIN_CPU} {CPU}",  # another install, same tag
        f"module load {CUDA}\nmodule load {PLAIN_EXT}",  # its depends_on swaps to its torch
    ], ids=["own", "same-tag", "load-swaps-back"])
    def test_allowed_and_works(self, eb_env: EasyBuildEnv, stack: list[str],
                               site_package: Path, script: str) -> None:
        run = eb_env.shell(_with(site_package, f"{script}\n{works('ext')}"))
        assert run.returncode == 0, run.stderr


class TestInconsistentEnvironment:
    """The mix is made without the SitePackage, which is installed afterwards."""

    BROKEN = f"module load {PLAIN_EXT}\nmodule swap {PLAIN_CPU} {CUDA}"

    @pytest.mark.parametrize(("command", "shows"), [
        ("module list", (PLAIN_EXT, CUDA)),
        ("module avail PyTorch", (PLAIN_CPU, CUDA)),
        ("module spider PyTorch", ("2.13.0-plain", "2.14.1-CUDA-13.0-whl")),
        (f"module show {PLAIN_EXT}", (f'depends_on("{PLAIN_CPU}")',)),
    ], ids=["list", "avail", "spider", "show"])
    def test_read_only_commands_work(self, eb_env: EasyBuildEnv, stack: list[str],
                                     site_package: Path, command: str,
                                     shows: tuple[str, ...]) -> None:
        run = eb_env.shell(f"{self.BROKEN}\n{_with(site_package, command)}")
        assert run.returncode == 0, run.stderr
        for text in shows:
            assert text in run.stdout + run.stderr

    def test_swap_that_repairs_is_allowed(self, eb_env: EasyBuildEnv, stack: list[str],
                                          site_package: Path) -> None:
        run = eb_env.shell(f"{self.BROKEN}\n"
                           f"{_with(site_package, f'module swap {CUDA} {PLAIN_CPU}')}\n"
                           f"{works('ext')}")
        assert run.returncode == 0, run.stderr

    def test_loading_more_while_broken_is_refused(self, eb_env: EasyBuildEnv, stack: list[str],
                                                  site_package: Path) -> None:
        assert_refused(eb_env, f"{self.BROKEN}\nexport LMOD_PACKAGE_PATH={site_package}",
                       f"module load {VISION}",
                       (PLAIN_EXT, CPU_TAG, CUDA_TAG, f"unload {PLAIN_EXT}"))
