"""Small wheels shaped like a torch release on PyPI and on a PyTorch variant index.

File names, tags and Requires-Dist follow the real ones (torch 2.9.1 pins nvidia-*-cu12 and
triton on PyPI; `+cpu` builds on the cpu index; torchvision pins torch exactly); the content
is a few bytes, so tests serve whole releases from 127.0.0.1 in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.wheelbuild import build_wheel

LINUX = 'platform_system == "Linux"'
TORCH_REQUIRES = ("filelock", "typing-extensions>=4.10.0", "setuptools", "sympy>=1.13.3",
                  "networkx>=2.5.1", "jinja2", "fsspec>=0.8.5")
CU12_PINS = {  # wheel project -> version, as torch 2.9.1 on PyPI pins them
    "nvidia-cuda-runtime-cu12": "12.8.90", "nvidia-cublas-cu12": "12.8.4.1",
    "nvidia-cudnn-cu12": "9.10.2.21", "nvidia-nccl-cu12": "2.27.5",
}
PYTHONS = ("313", "312")
ARCHS = ("x86_64", "aarch64")


def _platform(arch: str) -> str:
    return f"manylinux_2_28_{arch}"


def _cp(python: str, arch: str) -> str:
    return f"cp{python}-cp{python}-{_platform(arch)}"


def _package(name: str) -> dict[str, bytes]:
    return {f"{name}/__init__.py": b"# test wheel\n"}


def pypi_release(dest: Path, torch: str = "2.9.1", vision: str = "0.24.1",
                 audio: str = "2.9.1", triton: str = "3.5.1",
                 pythons: tuple[str, ...] = PYTHONS, archs: tuple[str, ...] = ARCHS) -> list[Path]:
    """PyPI's side: the default (CUDA 12.8) torch, companions, triton, nvidia and pure wheels."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = tuple(f"{p}=={v}; {LINUX}" for p, v in CU12_PINS.items())
    torch_requires = (*TORCH_REQUIRES, *pins, f'triton=={triton}; {LINUX}')
    wheels = []
    for python in pythons:
        for arch in archs:
            tag = _cp(python, arch)
            wheels.append(build_wheel(dest, "torch", torch, _package("torch"), torch_requires, tag))
            wheels += _companions(dest, torch, vision, audio, tag)
            wheels.append(build_wheel(dest, "triton", triton, _package("triton"), (),
                                      f"cp{python}-cp{python}-manylinux_2_27_{arch}."
                                      f"manylinux_2_28_{arch}"))
    for arch in archs:
        for project, version in CU12_PINS.items():
            requires = ("nvidia-cublas-cu12",) if project == "nvidia-cudnn-cu12" else ()
            module = project.replace("-", "_")
            wheels.append(build_wheel(dest, module, version, _package(module), requires,
                                      f"py3-none-manylinux_2_27_{arch}"))
    wheels.append(build_wheel(dest, "sympy", "1.14.0", _package("sympy"),
                              ("mpmath<1.4,>=1.1.0",)))
    wheels.append(build_wheel(dest, "mpmath", "1.3.0", _package("mpmath")))
    return wheels


def _companions(dest: Path, torch: str, vision: str, audio: str, tag: str) -> list[Path]:
    """torchvision (with an older and a newer release around it) and torchaudio."""
    major, minor, _ = (int(p) for p in vision.split("."))
    release = [int(p) for p in torch.split(".")]
    return [
        build_wheel(dest, "torchvision", vision, _package("torchvision"),
                    ("numpy", f"torch=={torch}", "pillow!=8.3.*,>=5.3.0"), tag),
        build_wheel(dest, "torchvision", f"{major}.{minor + 1}.0", _package("torchvision"),
                    ("numpy", f"torch=={release[0]}.{release[1] + 1}.0"), tag),
        build_wheel(dest, "torchvision", f"{major}.{minor}.0", _package("torchvision"),
                    ("numpy", f"torch=={release[0]}.{release[1]}.0"), tag),
        build_wheel(dest, "torchaudio", audio, _package("torchaudio"), (f"torch=={torch}",), tag),
    ]


def cpu_release(dest: Path, torch: str = "2.9.1", vision: str = "0.24.1", audio: str = "2.9.1",
                pythons: tuple[str, ...] = PYTHONS, archs: tuple[str, ...] = ARCHS) -> list[Path]:
    """The cpu variant index's side: `+cpu` builds that pin no CUDA library."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for python in pythons:
        for arch in archs:
            tag = _cp(python, arch)
            wheels.append(build_wheel(dest, "torch", f"{torch}+cpu", _package("torch"),
                                      TORCH_REQUIRES, tag))
            wheels.append(build_wheel(dest, "torchvision", f"{vision}+cpu", _package("torchvision"),
                                      ("numpy", f"torch=={torch}"), tag))
            wheels.append(build_wheel(dest, "torchaudio", f"{audio}+cpu", _package("torchaudio"),
                                      (f"torch=={torch}",), tag))
    return wheels


def release_indexes(dest: Path) -> dict[str, list[Path]]:
    """torch 2.9.1's release by the index that serves it: "pypi" and "cpu" (the variant index)."""
    return {"pypi": pypi_release(dest / "pypi"), "cpu": cpu_release(dest / "cpu")}


@pytest.fixture(scope="module", name="wheels")
def wheels_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """`release_indexes` once per test module (import it as the fixture `wheels`)."""
    return release_indexes(tmp_path_factory.mktemp("release-2.9.1"))
