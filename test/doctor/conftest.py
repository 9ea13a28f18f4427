"""The environments doctor tests diagnose: real venvs with the real wheels (see doctorenv.py).

torch 2.14.1 with and without its nvidia wheels, torch 2.13.0+cpu alone and beside
torchvision 0.28.0, and the stand-in EasyBuild Python. Session-scoped: each is made once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.doctorenv import (
    TORCH_RUNTIME,
    TORCHVISION_RUNTIME,
    Diagnosis,
    Factory,
    clean_environ,
    doctor,
    make_eb_python,
    make_venv,
    pip_wheels,
)


@pytest.fixture(scope="session")
def runtime_wheels() -> list[Path]:
    return pip_wheels(TORCH_RUNTIME)


@pytest.fixture(scope="session")
def cpu_venv(real_wheel: Factory, runtime_wheels: list[Path]) -> Path:
    """torch 2.13.0+cpu and what it imports."""
    return make_venv("cpu", [real_wheel("torch-2.13.0"), *runtime_wheels])


@pytest.fixture(scope="session")
def cpu_vision_venv(real_wheel: Factory, runtime_wheels: list[Path]) -> Path:
    """torch 2.13.0+cpu beside torchvision 0.28.0, the CUDA 13 build of PyPI."""
    wheels = [real_wheel("torch-2.13.0"), real_wheel("torchvision-0.28.0"), *runtime_wheels,
              *pip_wheels(TORCHVISION_RUNTIME)]
    return make_venv("cpu-vision", wheels)


@pytest.fixture(scope="session")
def cu13_bare_venv(real_wheel: Factory, runtime_wheels: list[Path]) -> Path:
    """torch 2.14.1 (CUDA 13) without any of the nvidia wheels it pins."""
    return make_venv("cu13-bare", [real_wheel("torch-2.14.1"), *runtime_wheels])


@pytest.fixture(scope="session")
def cu13_full_venv(cuda_stack: dict[str, Path]) -> Path:
    """torch 2.14.1 with every wheel it pins (about 5 GB, hard-linked from uv's cache)."""
    return make_venv("cu13-full", sorted(cuda_stack.values()))


@pytest.fixture(scope="session")
def eb_python() -> Path:
    return make_eb_python()


@pytest.fixture(scope="session")
def cu13_bare_report(cu13_bare_venv: Path) -> Diagnosis:
    """doctor's exit code and report on torch 2.14.1 without its nvidia wheels."""
    return doctor(cu13_bare_venv / "bin" / "python", clean_environ())
