"""The swap matrix with real Lmod, shared by the tests of eb-built PyTorch modules.

A cell is one consumer module, the PyTorch module it was built on (`own`), another PyTorch
module (`other`) and whether the consumer really runs on the other one. For every cell the
guards' verdict must agree with reality: in the environment Lmod leaves, importing the consumer
and calling one of its functions succeeds exactly when the command was allowed; a refused
command names the consumer, both abi tags and what to load or unload instead, and leaves the
environment exactly as it was; and forced together (PYTHONPATH, no module), the pair fails.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.ebenv import EasyBuildEnv
from torchstack.guards.record import read_fingerprint

# How each consumer class is called: ext is cxx, vision is stable (CUDA 13), toy is python.
CALLS = {
    "ext": "import torch, torchstack_demo_ext as e; "
           "assert e.add_one(torch.zeros(2)).tolist() == [1, 1]",
    "toy": "import torchtoy; assert int(torchtoy.double(21)) == 42",
    "vision": "import torch, torchvision; from torchvision.ops import nms; "
              "nms(torch.tensor([[0., 0., 1., 1.]]), torch.tensor([1.]), 0.5)",
}
# Real consumers beyond the companions (test_swap_consumers.py), each calling an operator of
# its own: fbgemm-gpu-cpu (cxx, no torch in its Requires-Dist), torchaudio (stable, CUDA 13).
BEYOND_CALLS = {
    "fbgemm": "import torch, fbgemm_gpu; x = torch.tensor([1, 2, 3]); "
              "assert torch.ops.fbgemm.asynchronous_complete_cumsum(x).tolist() == [0, 1, 3, 6]",
    "audio": "import torch; from torchaudio.functional import forced_align; "
             "e = torch.randn(1, 10, 5).log_softmax(-1); "
             "forced_align(e, torch.tensor([[1, 2, 3]], dtype=torch.int32), blank=0)",
}
_MARK = "--- environment ---"
# Variables that differ between two shells whatever Lmod does.
_VOLATILE = ("_", "SHLVL", "OLDPWD")


@dataclass(frozen=True)
class Cell:
    """A consumer (a key of CALLS), its own PyTorch module and another one."""

    consumer: str
    own: str
    other: str
    compatible: bool  # does the consumer really run on `other`?


# The PyTorch modules conftest installs with the torchstack easyblocks (Lmod and Tcl trees):
# torch 2.13.0+cpu, a second install of it (same abi tag) and torch 2.14.1 (CUDA 13 wheels).
CPU, CPU_COPY = "PyTorch/2.13.0-whl", "PyTorch/2.13.0-copy-whl"
CUDA = "PyTorch/2.14.1-CUDA-13.0-whl"


def companion_cells(cpu: str, copy: str, cuda: str) -> dict[str, Cell]:
    """The cells of the companion consumers (CALLS) by test id, on one set of PyTorch modules:
    `cpu` (torch 2.13.0+cpu), `copy` (another install of it), `cuda` (torch 2.14.1, CUDA 13)."""
    return {
        "cxx-other-release": Cell("ext", cpu, cuda, False),  # another release and CUDA flavour
        "cxx-same-tag": Cell("ext", cpu, copy, True),  # another install with the same abi tag
        "python-newer": Cell("toy", cpu, cuda, True),  # torch>=2.13 holds for 2.14.1
        "stable-older-cpu": Cell("vision", cuda, cpu, False),  # 2.13.0 < 2.14 and has no CUDA
    }


def beyond_cells(cpu: str, cuda: str) -> dict[str, Cell]:
    """The cells of the consumers beyond the companions (BEYOND_CALLS), both built on `cuda`."""
    return {
        "cxx-older-release": Cell("fbgemm", cuda, cpu, False),  # 2.13.0 lacks its symbols
        # its shims need 2.13.0, its CUDA code a CUDA torch
        "stable-cpu-provider": Cell("audio", cuda, cpu, False),
    }


def works(consumer: str) -> str:
    """The shell line that imports the consumer and calls one of its functions."""
    return f"python -c {shlex.quote((CALLS | BEYOND_CALLS)[consumer])}"


def message(run: subprocess.CompletedProcess[str]) -> str:
    """Lmod's stderr with its line wrapping undone."""
    return " ".join(run.stderr.split())


def environment(eb_env: EasyBuildEnv, script: str) -> dict[str, str]:
    """The whole environment after `script` in a fresh shell, but for variables of bash."""
    run = eb_env.shell(f"{script}\necho {_MARK}\nenv -0")
    assert run.returncode == 0, run.stderr
    dump = run.stdout.split(_MARK + "\n", 1)[1]
    pairs = (p.split("=", 1) for p in dump.split("\0") if "=" in p)
    return {k: v for k, v in pairs if k not in _VOLATILE}


def software(eb_env: EasyBuildEnv, module: str) -> Path:
    return eb_env.installpath / "software" / module


def recorded_tag(eb_env: EasyBuildEnv, module: str) -> str:
    """The abi tag that the installation of `module` recorded."""
    found = read_fingerprint(software(eb_env, module))
    assert found is not None, f"{module} recorded no fingerprint"
    return found.abi_tag


def site_packages(eb_env: EasyBuildEnv, module: str) -> str:
    return str(next(software(eb_env, module).glob("lib/python*/site-packages")))


def forced(eb_env: EasyBuildEnv, module: str, consumer: str,
           torch: str) -> subprocess.CompletedProcess[str]:
    """The consumer run on `torch` with no module between them: what a refusal prevents."""
    return eb_env.shell(f"module load {torch}\n"
                        f"export PYTHONPATH={site_packages(eb_env, module)}:$PYTHONPATH\n"
                        f"{works(consumer)}")


def assert_refused(eb_env: EasyBuildEnv, setup: str, command: str,
                   must_name: tuple[str, ...]) -> str:
    """`command` fails after `setup`, names `must_name`, changes nothing; returns its message."""
    run = eb_env.shell(f"{setup}\n{command}")
    assert run.returncode != 0, run.stdout
    text = message(run)
    for name in must_name:
        assert name in text, (name, text)
    assert environment(eb_env, f"{setup}\n{command} || true") == environment(eb_env, setup)
    return text


def assert_runs_on_own(eb_env: EasyBuildEnv, module: str, consumer: str) -> None:
    run = eb_env.shell(f"module load {module}\n{works(consumer)}")
    assert run.returncode == 0, run.stderr


def refusal_names(eb_env: EasyBuildEnv, module: str, cell: Cell) -> tuple[str, ...]:
    """What a guard's refusal must name: consumer, both tags, the module to load instead."""
    return (module, recorded_tag(eb_env, module), recorded_tag(eb_env, cell.other),
            cell.own, "unload")


def assert_swap(eb_env: EasyBuildEnv, module: str, cell: Cell) -> None:
    """Consumer loaded on its own torch, `module swap own other`: the provider half decides."""
    setup, swap = f"module load {module}", f"module swap {cell.own} {cell.other}"
    if cell.compatible:
        there = eb_env.shell(f"{setup}\n{swap}\n{works(cell.consumer)}")
        assert there.returncode == 0, there.stderr
        back = eb_env.shell(f"{setup}\n{swap}\nmodule swap {cell.other} {cell.own}\n"
                            f"{works(cell.consumer)}")
        assert back.returncode == 0, back.stderr
        return
    assert_refused(eb_env, setup, swap, refusal_names(eb_env, module, cell))
    assert forced(eb_env, module, cell.consumer, cell.other).returncode != 0


def assert_load(eb_env: EasyBuildEnv, module: str, cell: Cell) -> None:
    """The other torch loaded first, then the consumer: the consumer half decides."""
    setup, load = f"module load {cell.other}", f"module load {module}"
    if cell.compatible:
        run = eb_env.shell(f"{setup}\n{load}\n{works(cell.consumer)}")
        assert run.returncode == 0, run.stderr
        return
    text = assert_refused(eb_env, setup, load, refusal_names(eb_env, module, cell))
    assert f"module swap {cell.other} {cell.own}" in text
