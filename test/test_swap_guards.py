"""The swap guards with real Lmod on modules installed by real eb runs.

Providers: torch 2.13.0+cpu (twice, same abi tag) and torch 2.14.1 (CUDA 13 wheels).
Consumers: a C++ extension built against 2.13.0 (cxx), torchvision 0.29.1 (stable, CUDA 13),
a pure-Python package requiring torch>=2.13 (python). For every cell the guard's verdict must
agree with reality: the consumer's function runs exactly when the guard allowed the command,
and fails (undefined symbols, missing operators) when the guard refused it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from conftest import consumer_module, stage_wheels
from ebenv import EasyBuildEnv, wheel_easyconfig

CPU, CPU_COPY = "PyTorch/2.13.0-whl", "PyTorch/2.13.0-copy-whl"
CUDA = "PyTorch/2.14.1-CUDA-13.0-whl"
CALLS = {
    "ext": "import torch, torchstack_demo_ext as e; "
           "assert e.add_one(torch.zeros(2)).tolist() == [1, 1]",
    "toy": "import torchtoy; assert int(torchtoy.double(21)) == 42",
    "vision": "import torch, torchvision; from torchvision.ops import nms; "
              "nms(torch.tensor([[0., 0., 1., 1.]]), torch.tensor([1.]), 0.5)",
}
# (consumer, its own provider, other provider, whether the consumer runs on the other one)
CELLS = [
    ("ext", CPU, CUDA, False),       # cxx: another release and CUDA flavour
    ("ext", CPU, CPU_COPY, True),    # cxx: another install with the same abi tag
    ("toy", CPU, CUDA, True),        # python: torch>=2.13 holds for 2.14.1
    ("vision", CUDA, CPU, False),    # stable: 2.13.0 is older than 2.14 and has no CUDA
]
IDS = ["cxx-other-release", "cxx-same-tag", "python-newer", "stable-older-cpu"]
TORCHSTACK_VARS = "env | grep -E '^(LOADEDMODULES|TORCHSTACK_[A-Z_]*)=' | sort"


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


def _site_packages(eb_env: EasyBuildEnv, module: str) -> str:
    name, version = module.split("/")
    return str(next((eb_env.installpath / "software" / name / version).glob(
        "lib/python*/site-packages")))


def _works(consumer: str) -> str:
    return f"python -c {shlex.quote(CALLS[consumer])}"


class TestSwap:
    @pytest.mark.parametrize(("consumer", "own", "other", "compatible"), CELLS, ids=IDS)
    def test_swap_verdict_matches_reality(
        self, eb_env: EasyBuildEnv, stack_modules: dict[str, str], consumer: str, own: str,
        other: str, compatible: bool,
    ) -> None:
        module = stack_modules[consumer]
        before = eb_env.shell(f"module load {module}\n{TORCHSTACK_VARS}")
        assert before.returncode == 0, before.stderr
        swap = eb_env.shell(f"module load {module}\nmodule swap {own} {other}\n"
                            f"{TORCHSTACK_VARS}\n{_works(consumer)}")
        if compatible:
            assert swap.returncode == 0, swap.stderr
            return
        assert swap.returncode != 0
        assert module in swap.stderr and own in swap.stderr
        # The refused swap changed nothing.
        after = eb_env.shell(f"module load {module}\n(module swap {own} {other} || true)\n"
                             f"{TORCHSTACK_VARS}")
        assert after.stdout == before.stdout
        # And the refusal is no false alarm: forced together, the consumer does not work.
        forced = eb_env.shell(f"module load {other}\nexport PYTHONPATH="
                              f"{_site_packages(eb_env, module)}:$PYTHONPATH\n"
                              f"{_works(consumer)}")
        assert forced.returncode != 0


class TestLoad:
    @pytest.mark.parametrize(("consumer", "own", "other", "compatible"), CELLS, ids=IDS)
    def test_load_on_other_provider(
        self, eb_env: EasyBuildEnv, stack_modules: dict[str, str], consumer: str, own: str,
        other: str, compatible: bool,
    ) -> None:
        module = stack_modules[consumer]
        load = eb_env.shell(f"module load {other}\nmodule load {module}\n"
                            f"{_works(consumer)}")
        assert (load.returncode == 0) is compatible, load.stderr
        if not compatible:
            assert "torchstack" in load.stderr
            assert own in load.stderr  # what to load instead

    @pytest.mark.parametrize("consumer", sorted(CALLS))
    def test_own_provider(self, eb_env: EasyBuildEnv, stack_modules: dict[str, str],
                          consumer: str) -> None:
        run = eb_env.shell(f"module load {stack_modules[consumer]}\n{_works(consumer)}")
        assert run.returncode == 0, run.stderr

    def test_unload_clears_registration(self, eb_env: EasyBuildEnv,
                                        stack_modules: dict[str, str]) -> None:
        run = eb_env.shell(f"module load {stack_modules['ext']}\n"
                           f"module unload {stack_modules['ext']}\n"
                           f"module load {CPU}\nmodule swap {CPU} {CUDA}\n"
                           "echo consumers=${TORCHSTACK_CONSUMERS:-none}")
        assert run.returncode == 0, run.stderr
        assert "consumers=none" in run.stdout


class TestTclModules:
    """A consumer module written with `eb --module-syntax=Tcl`, read by Lmod: the Tcl consumer
    half refuses like the Lua one (Lmod turns the Tcl `error` into an aborted command)."""

    @pytest.fixture(scope="class")
    def tcl_ext(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                demo_ext_wheel: Path) -> str:
        return consumer_module(eb_env, demo_ext_wheel, "torchstack_demo_ext", "0.1",
                               suffix="-tcl", options=("--module-syntax=Tcl",))

    def test_tcl_consumer_guard(self, eb_env: EasyBuildEnv, tcl_ext: str,
                                cuda_wheels_module: str) -> None:
        text = (eb_env.installpath / "modules" / "all" / tcl_ext).read_text()
        assert text.startswith("#%Module")
        assert text.index("TORCHSTACK_CONSUMERS") < text.index("PyTorch/2.13.0-whl")
        ok = eb_env.shell(f"module load {tcl_ext}\n{_works('ext')}")
        assert ok.returncode == 0, ok.stderr
        refused = eb_env.shell(f"module load {tcl_ext}\nmodule swap {CPU} {CUDA}")
        assert refused.returncode != 0
        assert tcl_ext in refused.stderr
        on_cuda = eb_env.shell(f"module load {CUDA}\nmodule load {tcl_ext}")
        assert on_cuda.returncode != 0
        assert CPU in on_cuda.stderr
