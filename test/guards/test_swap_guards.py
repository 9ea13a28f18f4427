"""The swap guards with real Lmod on modules installed by real eb runs.

Providers: torch 2.13.0+cpu (twice, same abi tag) and torch 2.14.1 (CUDA 13 wheels).
Consumers: a C++ extension built against 2.13.0 (cxx), torchvision 0.29.1 (stable, CUDA 13),
a pure-Python package requiring torch>=2.13 (python). Every cell is checked both ways (the
consumer loaded first and the torch swapped under it; the other torch loaded first and the
consumer loaded on it) by the shared helpers of swapmatrix.py: the verdict agrees with reality.
The Tcl modules are in test_tcl_provider.py.
"""

from __future__ import annotations

import pytest
from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.ebmodules import stage_wheels
from support.swapmatrix import (
    CALLS,
    CPU,
    CPU_COPY,
    CUDA,
    Cell,
    assert_load,
    assert_runs_on_own,
    assert_swap,
    companion_cells,
)

CELLS = companion_cells(CPU, CPU_COPY, CUDA)


@pytest.fixture(scope="session")
def cpu_copy_module(eb_env: EasyBuildEnv, pytorch_cpu_module: str, real_wheel: object) -> str:
    """A second install of the torch 2.13.0+cpu wheel: same abi tag, another module."""
    wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
    easyconfig = wheel_easyconfig(
        eb_env.root / "PyTorch-2.13.0-copy-whl.eb", "PyTorch", "2.13.0",
        [(n, "2.13.0+cpu", w, s) for n, _, w, s in stage_wheels(eb_env, "PyTorch", [wheel])],
        versionsuffix="-copy-whl",
    )
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-3000:]
    return CPU_COPY


@pytest.fixture(scope="session")
def stack_modules(demo_ext_module: str, toy_module: str, torchvision_stable_module: str,
                  cpu_copy_module: str) -> dict[str, str]:
    return {"ext": demo_ext_module, "toy": toy_module, "vision": torchvision_stable_module}


class TestSwap:
    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_swap_verdict_matches_reality(self, eb_env: EasyBuildEnv,
                                          stack_modules: dict[str, str], cell: Cell) -> None:
        assert_swap(eb_env, stack_modules[cell.consumer], cell)


class TestLoad:
    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_load_on_other_provider(self, eb_env: EasyBuildEnv,
                                    stack_modules: dict[str, str], cell: Cell) -> None:
        assert_load(eb_env, stack_modules[cell.consumer], cell)

    @pytest.mark.parametrize("consumer", sorted(CALLS))
    def test_own_provider(self, eb_env: EasyBuildEnv, stack_modules: dict[str, str],
                          consumer: str) -> None:
        assert_runs_on_own(eb_env, stack_modules[consumer], consumer)

    def test_unload_clears_registration(self, eb_env: EasyBuildEnv,
                                        stack_modules: dict[str, str]) -> None:
        run = eb_env.shell(f"module load {stack_modules['ext']}\n"
                           f"module unload {stack_modules['ext']}\n"
                           f"module load {CPU}\nmodule swap {CPU} {CUDA}\n"
                           "echo consumers=${TORCHSTACK_CONSUMERS:-none}")
        assert run.returncode == 0, run.stderr
        assert "consumers=none" in run.stdout
