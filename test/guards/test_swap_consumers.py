"""Real consumers beyond the companions, installed by real eb from real PyPI wheels and
guarded like the others: fbgemm-gpu-cpu 1.9.0 (libtorch's C++ API; its Requires-Dist names no
torch) and torchaudio 2.11.1 (stable C shims, CUDA 13), both on PyTorch 2.14.1 (CUDA 13).

What install records must be what torchstack.index.wheelelf predicted from range reads of the
same wheel before install, and every swap and load verdict must agree with reality
(swapmatrix.py): refused where the pair really fails, on the CPU-only torch 2.13.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.ebenv import EasyBuildEnv
from support.ebmodules import WHEELS, beyond_module
from support.swapmatrix import (
    CPU,
    CUDA,
    Cell,
    assert_load,
    assert_runs_on_own,
    assert_swap,
    beyond_cells,
    software,
)

from torchstack.fingerprint import compat
from torchstack.guards.record import read_fingerprint
from torchstack.index import wheelelf

CELLS = beyond_cells(CPU, CUDA)


@pytest.fixture(scope="session")
def beyond_modules(eb_env: EasyBuildEnv, cuda_wheels_module: str, pytorch_cpu_module: str,
                   real_wheel: Any) -> dict[str, str]:
    return {key: beyond_module(eb_env, real_wheel(wheel), name, version, modulename)
            for key, (wheel, name, version, modulename) in WHEELS.items()}


class TestPredictionIsRecorded:
    @pytest.mark.parametrize("key, link", [("fbgemm", "cxx"), ("audio", "stable")])
    def test_recorded_equals_predicted(self, eb_env: EasyBuildEnv, real_wheel: Any,
                                       beyond_modules: dict[str, str], key: str,
                                       link: str) -> None:
        wheel: Path = real_wheel(WHEELS[key][0])
        predicted = wheelelf.predict_file(wheel).fingerprint
        provider = read_fingerprint(software(eb_env, CUDA))
        recorded = read_fingerprint(software(eb_env, beyond_modules[key]))
        assert predicted is not None and provider is not None and recorded is not None
        # a C++ consumer that names no release is taken as built on the torch it installs on
        expected = compat.assume_built_against(provider, predicted)
        assert (recorded.link, recorded.abi_tag, recorded.cuda_major) == \
            (link, expected.abi_tag, expected.cuda_major)


class TestSwap:
    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_swap_verdict_matches_reality(self, eb_env: EasyBuildEnv,
                                          beyond_modules: dict[str, str], cell: Cell) -> None:
        assert_swap(eb_env, beyond_modules[cell.consumer], cell)

    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_load_on_other_provider(self, eb_env: EasyBuildEnv,
                                    beyond_modules: dict[str, str], cell: Cell) -> None:
        assert_load(eb_env, beyond_modules[cell.consumer], cell)

    @pytest.mark.parametrize("consumer", sorted(WHEELS))
    def test_own_provider(self, eb_env: EasyBuildEnv, beyond_modules: dict[str, str],
                          consumer: str) -> None:
        assert_runs_on_own(eb_env, beyond_modules[consumer], consumer)
