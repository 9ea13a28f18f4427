"""The swap matrix under Environment Modules 5 (Debian's modulecmd.tcl 5.2) on Tcl modules
that the real eb installed with --modules-tool=EnvironmentModules (conftest: em_torch,
em_consumers), with torchstack's siteconfig.tcl hook as a site installs it.

Every cell of the Lmod matrix (test_swap_guards.py, test_swap_consumers.py), by the shared
helpers of swapmatrix.py: a refused swap or load names the consumer, both abi tags and the
module to use instead, in one message without a Tcl stack trace, and leaves the environment
exactly as it was; forced together, the pair really fails. Modules' own dependency handling
is stricter than Lmod's: a consumer requires the very PyTorch module it was built on
(EasyBuild writes `module load PyTorch/...`) and PyTorch modules conflict with each other, so
the compatible cells are refused by Modules itself (torchstack says nothing), all or nothing
with the hook. Without the hook the guards alone still refuse every unsafe mix, but
`module switch` drops the refused dependent instead of refusing whole (measured below).
"""

from __future__ import annotations

import pytest
from support.emenv import TCL_TRACE, EnvModulesEnv
from support.swapmatrix import (
    CALLS,
    CPU,
    CPU_COPY,
    CUDA,
    Cell,
    assert_load,
    assert_refused,
    assert_runs_on_own,
    assert_swap,
    beyond_cells,
    companion_cells,
    environment,
    message,
    recorded_tag,
)

# the modules em_torch installs have the names of the Lmod ones
CELLS = companion_cells(CPU, CPU_COPY, CUDA) | beyond_cells(CPU, CUDA)
REFUSED = {key: cell for key, cell in CELLS.items() if not cell.compatible}


def _one_clean_message(text: str) -> None:
    assert text.count("torchstack:") == 1, text
    assert not [t for t in TCL_TRACE if t in text], text


def _modules_refuses(em_env: EnvModulesEnv, setup: str, command: str) -> str:
    """Modules' own dependency handling refuses `command`, all or nothing; torchstack is silent."""
    run = em_env.shell(f"{setup}\n{command}")
    assert run.returncode != 0, run.stdout
    text = message(run)
    assert "torchstack:" not in text, text
    assert environment(em_env, f"{setup}\n{command} || true") == environment(em_env, setup)
    return text


class TestSwap:
    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_swap(self, em_env: EnvModulesEnv, em_consumers: dict[str, str], cell: Cell) -> None:
        module = em_consumers[cell.consumer]
        setup, swap = f"module load {module}", f"module switch {cell.own} {cell.other}"
        if cell.compatible:
            text = _modules_refuses(em_env, setup, swap)
            assert f"Requirement {cell.own} is not loaded" in text
            return
        assert_swap(em_env, module, cell)
        _one_clean_message(message(em_env.shell(f"{setup}\n{swap}")))


class TestLoad:
    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_load(self, em_env: EnvModulesEnv, em_consumers: dict[str, str], cell: Cell) -> None:
        module = em_consumers[cell.consumer]
        setup, load = f"module load {cell.other}", f"module load {module}"
        if cell.compatible:
            text = _modules_refuses(em_env, setup, load)
            assert "conflict" in text
            return
        assert_load(em_env, module, cell)
        _one_clean_message(message(em_env.shell(f"{setup}\n{load}")))

    @pytest.mark.parametrize("consumer", [*sorted(CALLS), "audio", "fbgemm"])
    def test_own_provider(self, em_env: EnvModulesEnv, em_consumers: dict[str, str],
                          consumer: str) -> None:
        # requirement loading brings the consumer's own torch, silently
        run = em_env.shell(f"module load {em_consumers[consumer]}")
        assert "torchstack:" not in run.stderr, run.stderr
        assert_runs_on_own(em_env, em_consumers[consumer], consumer)

    def test_safe_switch_without_dependents(self, em_env: EnvModulesEnv,
                                            em_torch: dict[str, str]) -> None:
        run = em_env.shell(f"module load {CPU}\nmodule switch {CPU} {CUDA}\n"
                           "echo abi=$TORCHSTACK_TORCH_ABI")
        assert run.returncode == 0, run.stderr
        assert f"abi={recorded_tag(em_env, CUDA)}" in run.stdout
        assert "torchstack:" not in run.stderr


class TestAutomatedHandling:
    def test_purge_clears_the_guard_variables(self, em_env: EnvModulesEnv,
                                              em_consumers: dict[str, str]) -> None:
        after = environment(em_env, f"module load {em_consumers['vision']}\nmodule purge")
        assert not [k for k in after if k.startswith("TORCHSTACK_")]

    def test_restore_of_a_saved_collection(self, em_env: EnvModulesEnv,
                                           em_consumers: dict[str, str]) -> None:
        saved = em_env.root / "collections" / "vision"
        saved.parent.mkdir(exist_ok=True)
        em_env.shell(f"module load {em_consumers['vision']}\nmodule save {saved}")
        # restored over an environment that holds the other torch and a consumer of it
        run = em_env.shell(f"module load {em_consumers['ext']}\nmodule restore {saved}\n"
                           f"python -c {CALLS['vision']!r}")
        assert run.returncode == 0, run.stderr
        assert "torchstack:" not in run.stderr

    def test_restore_of_an_unsafe_collection_is_refused_whole(
            self, em_env: EnvModulesEnv, em_consumers: dict[str, str]) -> None:
        saved = em_env.root / "collections" / "unsafe"
        saved.parent.mkdir(exist_ok=True)
        em_env.shell(f"module load {em_consumers['vision']}\nmodule save {saved}")
        # edited by hand: vision's torch (saved by name alone, the default) pinned to the CPU one
        text = saved.read_text()
        assert "module load --tag=auto-loaded PyTorch\n" in text, text
        saved.write_text(text.replace("auto-loaded PyTorch\n", f"auto-loaded {CPU}\n"))
        text = assert_refused(em_env, f"module load {em_consumers['ext']}",
                              f"module restore {saved}",
                              (em_consumers["vision"], recorded_tag(em_env, CPU), CUDA))
        _one_clean_message(text)


class TestWithoutHook:
    """The module files' guards alone: no unsafe mix, but a switch is not refused whole."""

    @pytest.mark.parametrize("cell", REFUSED.values(), ids=REFUSED.keys())
    def test_switch_drops_the_refused_dependent(self, em_env: EnvModulesEnv,
                                                em_consumers: dict[str, str],
                                                cell: Cell) -> None:
        bare, module = em_env.without_hook(), em_consumers[cell.consumer]
        script = f"module load {module}\nmodule switch {cell.own} {cell.other}"
        run = bare.shell(script)
        assert run.returncode != 0
        text = message(run)
        assert "torchstack: cannot load" in text and module in text, text
        assert not [t for t in TCL_TRACE if t in text], text
        after = environment(bare, f"{script} || true")
        assert after["LOADEDMODULES"].split(":")[-1] == cell.other  # the dependent is gone
        assert module not in after.get("TORCHSTACK_CONSUMERS", "")

    def test_load_is_refused_whole(self, em_env: EnvModulesEnv,
                                   em_consumers: dict[str, str]) -> None:
        bare = em_env.without_hook()
        assert_load(bare, em_consumers["vision"], Cell("vision", CUDA, CPU, False))


class TestModuleFiles:
    """What eb --modules-tool=EnvironmentModules --module-syntax=Tcl wrote (PyTorchWheels)."""

    def _text(self, em_env: EnvModulesEnv, module: str) -> str:
        return (em_env.installpath / "modules" / "all" / module).read_text()

    @pytest.mark.parametrize("which", ["cpu", "cuda"])
    def test_provider(self, em_env: EnvModulesEnv, em_torch: dict[str, str], which: str) -> None:
        module = em_torch[which]
        text = self._text(em_env, module)
        assert text.startswith("#%Module")
        assert f'set torchstack_tag "{recorded_tag(em_env, module)}"' in text
        assert "MODULES_ERR_GLOBAL" in text

    @pytest.mark.parametrize("consumer", ["ext", "vision"])
    def test_consumer_half_before_its_load(self, em_env: EnvModulesEnv,
                                           em_consumers: dict[str, str], consumer: str) -> None:
        text = self._text(em_env, em_consumers[consumer])
        register = text.index('prepend-path -d ";" TORCHSTACK_CONSUMERS')
        assert register < text.index("module load PyTorch/")
