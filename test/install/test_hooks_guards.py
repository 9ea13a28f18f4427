"""The hooks file on modules built by EasyBuild's own PythonBundle: fingerprints and guards.

`eb --hooks "$(torchstack hooks-path)"` must give upstream-style `-whl` installations what the
torchstack easyblocks give theirs, and leave installations without torch untouched. All the
modules here are plain PythonBundle easyconfigs built with the hooks file: providers torch
2.13.0+cpu (twice, same abi tag) and torch 2.14.1 for CUDA 13 the way upstream's CUDA `-whl`
easyconfigs install it (on the site's CUDA, cuDNN, NCCL, ... modules, with a CUDA-wheel-bundle
of dummy packages for the nvidia wheels torch pins); consumers a C++ extension built against
2.13.0 (cxx), torchvision 0.29.1 (stable, CUDA 13) and a pure-Python package requiring
torch>=2.13 (python). The swap matrix is the one test_swap_guards.py runs on
PyTorchWheels modules (swapmatrix.py): every verdict agrees with reality.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support.cudastack import IN_PYTHON_MODULE, PYTHON_WHEELS, wheel_version
from support.ebenv import PYTHON_VERSION, EasyBuildEnv, wheel_easyconfig
from support.ebmodules import consumer_module, stage_wheels
from support.swapmatrix import (
    CALLS,
    Cell,
    assert_load,
    assert_runs_on_own,
    assert_swap,
    companion_cells,
    recorded_tag,
    software,
)
from support.wheelbuild import build_wheel

from torchstack.distributions import open_wheel
from torchstack.guards.record import FINGERPRINT_FILE, read_fingerprint
from torchstack.paths import hooks_path

PB_CPU, PB_COPY = "PyTorch/2.13.0-pb", "PyTorch/2.13.0-copy-pb"
PB_CUDA = "PyTorch/2.14.1-CUDA-13.0-pb"
CELLS = companion_cells(PB_CPU, PB_COPY, PB_CUDA)
# cuda-bindings and cuda-pathfinder install namespace packages, with no module of their own
# name for PythonBundle's import check; torch is imported instead.
CUDA_BUNDLE_EXTRA = ("exts_default_options = {'modulename': False}\n"
                     "sanity_check_commands = [\"python -c 'import torch'\"]\n")


def _bundle(eb_env: EasyBuildEnv, wheel: Path, name: str, version: str,
            dependencies: list[tuple[str, ...]]) -> str:
    """An upstream-style PythonBundle module of one wheel, built with the hooks file."""
    return consumer_module(eb_env, wheel, name, version, dependencies, suffix="-pb",
                           easyblock="PythonBundle", options=(f"--hooks={hooks_path()}",))


def _torch_bundle(eb_env: EasyBuildEnv, wheels: list[Path], version: str, suffix: str,
                  extra: str = "", dependencies: list[tuple[str, ...]] | None = None) -> str:
    """PyTorch as an upstream-style PythonBundle module of wheels, built with the hooks file."""
    easyconfig = wheel_easyconfig(eb_env.root / f"PyTorch-{version}{suffix}.eb", "PyTorch",
                                  version, stage_wheels(eb_env, "PyTorch", wheels),
                                  dependencies=dependencies, versionsuffix=suffix,
                                  easyblock="PythonBundle", extra=extra)
    result = eb_env.eb(easyconfig, f"--hooks={hooks_path()}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return f"PyTorch/{version}{suffix}"


def _cuda_wheel_bundle(eb_env: EasyBuildEnv, cuda_stack: dict[str, Path],
                       cuda_modules: list[tuple[str, str]]) -> tuple[str, str]:
    """Upstream's CUDA-wheel-bundle: dummy packages (metadata only) for the nvidia wheels torch
    pins, whose libraries the CUDA, cuDNN, ... modules provide, so that pip check passes. pip
    check reads torch's requirements without their extras: the nvidia wheels that cuda-toolkit's
    extras pull in need no dummy."""
    with open_wheel(cuda_stack["torch"]) as torch:
        required = {canonicalize_name(requirement.name)
                    for requirement in map(Requirement, torch.requires_dist)
                    if requirement.marker is None or requirement.marker.evaluate({"extra": ""})}
    provided = IN_PYTHON_MODULE | set(PYTHON_WHEELS)
    dummies = sorted((name, wheel_version(cuda_stack[name])) for name in required - provided)
    version = dict(cuda_modules)["CUDA"]
    easyconfig = eb_env.root / f"CUDA-wheel-bundle-{version}.eb"
    easyconfig.write_text(
        "easyblock = 'PythonBundle'\n"
        f"name = 'CUDA-wheel-bundle'\nversion = {version!r}\n"
        "homepage = 'https://developer.nvidia.com/cuda'\n"
        "description = 'Repackaging of NVIDIA CUDA libraries as Python packages'\n"
        "toolchain = SYSTEM\n"
        f"dependencies = {[('Python', PYTHON_VERSION), *cuda_modules]!r}\n"
        "dummy_package = True\n"
        f"exts_list = {dummies!r}\n"
        "moduleclass = 'lib'\n")
    result = eb_env.eb(easyconfig, f"--hooks={hooks_path()}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "TORCHSTACK" not in _module_text(eb_env, f"CUDA-wheel-bundle/{version}")
    return "CUDA-wheel-bundle", version


def _dependency(module: str) -> tuple[str, str, str]:
    name, _, full = module.partition("/")
    version, _, suffix = full.partition("-")
    return name, version, "-" + suffix


@pytest.fixture(scope="session")
def pb_torch(eb_env: EasyBuildEnv, real_wheel: object) -> str:
    return _torch_bundle(eb_env, [real_wheel("torch-2.13.0")],  # type: ignore[operator]
                         "2.13.0", "-pb")


@pytest.fixture(scope="session")
def pb_copy(eb_env: EasyBuildEnv, real_wheel: object) -> str:
    """A second install of the torch 2.13.0+cpu wheel: same abi tag, another module."""
    return _torch_bundle(eb_env, [real_wheel("torch-2.13.0")],  # type: ignore[operator]
                         "2.13.0", "-copy-pb")


@pytest.fixture(scope="session")
def pb_cuda(eb_env: EasyBuildEnv, cuda_stack: dict[str, Path],
            cuda_modules: list[tuple[str, str]]) -> str:
    """torch 2.14.1 and its other Python wheels, one PythonBundle on the CUDA modules."""
    bundle = _cuda_wheel_bundle(eb_env, cuda_stack, cuda_modules)
    return _torch_bundle(eb_env, [cuda_stack[name] for name in PYTHON_WHEELS], "2.14.1",
                         "-CUDA-13.0-pb", CUDA_BUNDLE_EXTRA, [*cuda_modules, bundle])


@pytest.fixture(scope="session")
def pb_ext(eb_env: EasyBuildEnv, pb_torch: str, demo_ext_wheel: Path) -> str:
    return _bundle(eb_env, demo_ext_wheel, "torchstack_demo_ext", "0.1", [_dependency(pb_torch)])


@pytest.fixture(scope="session")
def pb_toy(eb_env: EasyBuildEnv, pb_torch: str, toy_wheel: Path) -> str:
    return _bundle(eb_env, toy_wheel, "torchtoy", "1.0", [_dependency(pb_torch)])


@pytest.fixture(scope="session")
def pb_vision(eb_env: EasyBuildEnv, pb_cuda: str, real_wheel: object) -> str:
    wheel = real_wheel("torchvision-0.29.1")  # type: ignore[operator]
    return _bundle(eb_env, wheel, "torchvision", "0.29.1", [_dependency(pb_cuda)])


@pytest.fixture(scope="session")
def pb_stack(pb_ext: str, pb_toy: str, pb_vision: str, pb_copy: str) -> dict[str, str]:
    """Every module of the matrix, built; the consumer modules by the keys of CALLS."""
    return {"ext": pb_ext, "toy": pb_toy, "vision": pb_vision}


def _module_text(eb_env: EasyBuildEnv, module: str) -> str:
    return (eb_env.installpath / "modules" / "all" / f"{module}.lua").read_text()


class TestRecording:
    @pytest.mark.parametrize(("which", "tag"), [
        (PB_CPU, "torch-2.13.0-cxx11-cpu"),
        (PB_COPY, "torch-2.13.0-cxx11-cpu"),  # the same tag: swaps between them are safe
        (PB_CUDA, "torch-2.14.1-cxx11-cu13"),
    ], ids=["cpu", "copy", "cuda"])
    def test_provider_recorded_and_guarded(self, eb_env: EasyBuildEnv, pb_stack: dict[str, str],
                                           which: str, tag: str) -> None:
        assert recorded_tag(eb_env, which) == tag
        text = _module_text(eb_env, which)
        assert "TORCHSTACK_TORCH_ABI" in text and f'"{tag}"' in text

    @pytest.mark.parametrize(("consumer", "link"),
                             [("ext", "cxx"), ("toy", "python"), ("vision", "stable")])
    def test_consumer_guard_before_its_dependency(self, eb_env: EasyBuildEnv,
                                                  pb_stack: dict[str, str], consumer: str,
                                                  link: str) -> None:
        module = pb_stack[consumer]
        found = read_fingerprint(software(eb_env, module))
        assert found is not None and found.link == link
        home = PB_CUDA if consumer == "vision" else PB_CPU
        text = _module_text(eb_env, module)
        assert text.index("TORCHSTACK_CONSUMERS") < text.index(f'depends_on("{home}")')

    @pytest.mark.parametrize("which", ["provider", "consumer"])
    def test_module_only_keeps_the_guards(self, eb_env: EasyBuildEnv, pb_stack: dict[str, str],
                                          which: str) -> None:
        # eb --module-only runs no post-processing, where the hook fingerprints: the module is
        # written again from the recorded fingerprint, guards and all
        module = PB_CPU if which == "provider" else pb_stack["ext"]
        before = _module_text(eb_env, module)
        easyconfig = eb_env.root / f"{module.replace('/', '-')}.eb"
        result = eb_env.eb(easyconfig, f"--hooks={hooks_path()}", "--module-only", "--rebuild")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert "TORCHSTACK" in before and _module_text(eb_env, module) == before

    def test_module_without_torch_untouched(self, eb_env: EasyBuildEnv, tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "plainpkg", "1.0", {"plainpkg/__init__.py": b""})
        module = _bundle(eb_env, wheel, "plainpkg", "1.0", [])
        assert "TORCHSTACK" not in _module_text(eb_env, module)
        assert not (software(eb_env, module) / FINGERPRINT_FILE).exists()


class TestMatrix:
    @pytest.mark.parametrize("consumer", sorted(CALLS))
    def test_own_provider(self, eb_env: EasyBuildEnv, pb_stack: dict[str, str],
                          consumer: str) -> None:
        assert_runs_on_own(eb_env, pb_stack[consumer], consumer)

    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_swap_under_consumer(self, eb_env: EasyBuildEnv, pb_stack: dict[str, str],
                                 cell: Cell) -> None:
        assert_swap(eb_env, pb_stack[cell.consumer], cell)

    @pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
    def test_consumer_on_other_provider(self, eb_env: EasyBuildEnv, pb_stack: dict[str, str],
                                        cell: Cell) -> None:
        assert_load(eb_env, pb_stack[cell.consumer], cell)
