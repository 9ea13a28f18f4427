"""Tcl modulefiles written by eb (`--module-syntax=Tcl`), read by the real Lmod.

PyTorch 2.13.0+cpu as a Tcl module twice: through the PyTorchWheels easyblock and through the
hooks file on a plain PythonBundle easyconfig. Its Tcl provider half must refuse a swap under a
loaded consumer that cannot run on it (Lmod turns the Tcl `error` into an aborted command that
changes nothing), allow a safe one, and tell consumers loaded after it which torch is loaded.
A Tcl consumer (the C++ extension) is checked on Lua and Tcl providers alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.ebmodules import consumer_module, stage_wheels
from support.swapmatrix import (
    CPU,
    CUDA,
    Cell,
    assert_load,
    assert_swap,
    environment,
    recorded_tag,
    works,
)

from torchstack.paths import hooks_path

ROUTES = {
    "easyblock": ("-tcl-whl", "PyTorchWheels", ()),
    "hooks": ("-tcl-pb", "PythonBundle", (f"--hooks={hooks_path()}",)),
}


@pytest.fixture(scope="session", params=sorted(ROUTES))
def tcl_torch(request: pytest.FixtureRequest, eb_env: EasyBuildEnv,
              real_wheel: object) -> str:
    """PyTorch 2.13.0+cpu as a Tcl module, by each route that writes guards."""
    suffix, easyblock, options = ROUTES[request.param]
    wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
    easyconfig = wheel_easyconfig(eb_env.root / f"PyTorch-2.13.0{suffix}.eb", "PyTorch",
                                  "2.13.0", stage_wheels(eb_env, "PyTorch", [wheel]),
                                  versionsuffix=suffix, easyblock=easyblock)
    result = eb_env.eb(easyconfig, "--module-syntax=Tcl", *options)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return f"PyTorch/2.13.0{suffix}"


@pytest.fixture(scope="session")
def tcl_ext(eb_env: EasyBuildEnv, pytorch_cpu_module: str, demo_ext_wheel: Path) -> str:
    """The C++ extension as a Tcl module on the Lua PyTorch/2.13.0-whl."""
    return consumer_module(eb_env, demo_ext_wheel, "torchstack_demo_ext", "0.1",
                           suffix="-tcl", options=("--module-syntax=Tcl",))


@pytest.fixture(scope="session")
def guarded(demo_ext_module: str, torchvision_stable_module: str) -> dict[str, str]:
    """The Lua consumer modules of conftest, by the keys of swapmatrix.CALLS."""
    return {"ext": demo_ext_module, "vision": torchvision_stable_module}


def _text(eb_env: EasyBuildEnv, module: str) -> str:
    return (eb_env.installpath / "modules" / "all" / module).read_text()


def _on_tcl_torch(which: str, tcl_torch: str) -> Cell:
    """The refused and the allowed cell of a Lua consumer and the Tcl provider `tcl_torch`:
    vision (stable, CUDA 13) cannot run on 2.13.0+cpu; ext (cxx) has the same tag."""
    return (Cell("vision", CUDA, tcl_torch, False) if which == "refused"
            else Cell("ext", CPU, tcl_torch, True))


class TestTclProvider:
    def test_module_file(self, eb_env: EasyBuildEnv, tcl_torch: str) -> None:
        text = _text(eb_env, tcl_torch)
        assert text.startswith("#%Module")
        assert "proc torchstack_fits" in text
        assert f'set torchstack_tag "{recorded_tag(eb_env, tcl_torch)}"' in text
        assert f'set torchstack_name "{tcl_torch}"' in text

    @pytest.mark.parametrize("which", ["refused", "allowed"])
    def test_swap_under_lua_consumer(self, eb_env: EasyBuildEnv, guarded: dict[str, str],
                                     cuda_wheels_module: str, tcl_torch: str,
                                     which: str) -> None:
        cell = _on_tcl_torch(which, tcl_torch)
        assert_swap(eb_env, guarded[cell.consumer], cell)

    @pytest.mark.parametrize("which", ["refused", "allowed"])
    def test_lua_consumer_loaded_after_it(self, eb_env: EasyBuildEnv, guarded: dict[str, str],
                                          cuda_wheels_module: str, tcl_torch: str,
                                          which: str) -> None:
        cell = _on_tcl_torch(which, tcl_torch)
        assert_load(eb_env, guarded[cell.consumer], cell)

    def test_refresh_and_unload(self, eb_env: EasyBuildEnv, guarded: dict[str, str],
                                tcl_torch: str) -> None:
        # Lmod re-reads Tcl modules in mode "load" on refresh: the guard finds nothing wrong
        setup = f"module load {guarded['ext']}\nmodule swap {CPU} {tcl_torch}"
        run = eb_env.shell(f"{setup}\nmodule refresh\n{works('ext')}")
        assert run.returncode == 0, run.stderr
        gone = environment(eb_env, f"{setup}\nmodule unload {tcl_torch}")
        assert not {"TORCHSTACK_TORCH_ABI", "TORCHSTACK_TORCH_MODULE"} & set(gone)
        assert guarded["ext"] in gone["TORCHSTACK_CONSUMERS"]


class TestTclConsumer:
    """The consumer half in Tcl: Lmod turns its `error` into an aborted command."""

    def test_module_file(self, eb_env: EasyBuildEnv, tcl_ext: str) -> None:
        text = _text(eb_env, tcl_ext)
        assert text.startswith("#%Module")
        register = text.index('prepend-path -d ";" TORCHSTACK_CONSUMERS')
        assert register < text.index(f"depends-on {CPU}")

    def test_on_lua_providers(self, eb_env: EasyBuildEnv, tcl_ext: str,
                              cuda_wheels_module: str) -> None:
        assert_swap(eb_env, tcl_ext, Cell("ext", CPU, CUDA, False))
        assert_load(eb_env, tcl_ext, Cell("ext", CPU, CUDA, False))

    def test_on_tcl_provider(self, eb_env: EasyBuildEnv, tcl_ext: str, tcl_torch: str) -> None:
        assert_swap(eb_env, tcl_ext, Cell("ext", CPU, tcl_torch, True))
        assert_load(eb_env, tcl_ext, Cell("ext", CPU, tcl_torch, True))
