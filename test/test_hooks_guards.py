"""The hooks file on modules built by EasyBuild's own PythonBundle: fingerprints and guards.

`eb --hooks "$(torchstack hooks-path)"` must give upstream-style `-whl` installations what the
torchstack easyblocks give theirs, and leave installations without torch untouched.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from conftest import consumer_module, stage_wheels
from ebenv import EasyBuildEnv, wheel_easyconfig
from wheelbuild import build_wheel

from torchstack.paths import hooks_path
from torchstack.record import FINGERPRINT_FILE

PB_TORCH = ("PyTorch", "2.13.0", "-pb")
CUDA = "PyTorch/2.14.1-CUDA-13.0-whl"


def _bundle(eb_env: EasyBuildEnv, wheel: Path, name: str, version: str,
            dependencies: list[tuple[str, ...]]) -> str:
    """An upstream-style PythonBundle module of one wheel, built with the hooks file."""
    return consumer_module(eb_env, wheel, name, version, dependencies, suffix="-pb",
                           easyblock="PythonBundle", options=(f"--hooks={hooks_path()}",))


@pytest.fixture(scope="session")
def pb_torch(eb_env: EasyBuildEnv, real_wheel: object) -> str:
    wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
    exts = [(n, "2.13.0+cpu", w, s) for n, _, w, s in stage_wheels(eb_env, "PyTorch", [wheel])]
    easyconfig = wheel_easyconfig(eb_env.root / "PyTorch-2.13.0-pb.eb", "PyTorch", "2.13.0",
                                  exts, versionsuffix="-pb", easyblock="PythonBundle")
    result = eb_env.eb(easyconfig, f"--hooks={hooks_path()}")
    assert result.returncode == 0, result.stdout[-3000:]
    return "PyTorch/2.13.0-pb"


@pytest.fixture(scope="session")
def pb_ext(eb_env: EasyBuildEnv, pb_torch: str, demo_ext_wheel: Path) -> str:
    return _bundle(eb_env, demo_ext_wheel, "torchstack_demo_ext", "0.1", [PB_TORCH])


@pytest.fixture(scope="session")
def pb_toy(eb_env: EasyBuildEnv, pb_torch: str, toy_wheel: Path) -> str:
    return _bundle(eb_env, toy_wheel, "torchtoy", "1.0", [PB_TORCH])


def _module_text(eb_env: EasyBuildEnv, module: str) -> str:
    return (eb_env.installpath / "modules" / "all" / f"{module}.lua").read_text()


class TestRecording:
    def test_provider_recorded_and_guarded(self, eb_env: EasyBuildEnv, pb_torch: str) -> None:
        software = eb_env.installpath / "software" / "PyTorch" / "2.13.0-pb"
        assert (software / FINGERPRINT_FILE).is_file()
        assert "TORCHSTACK_TORCH_ABI" in _module_text(eb_env, pb_torch)

    def test_consumer_guard_before_its_dependency(self, eb_env: EasyBuildEnv,
                                                  pb_ext: str) -> None:
        text = _module_text(eb_env, pb_ext)
        assert text.index("TORCHSTACK_CONSUMERS") < text.index('depends_on("PyTorch/2.13.0-pb")')

    def test_module_without_torch_untouched(self, eb_env: EasyBuildEnv, tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "plainpkg", "1.0", {"plainpkg/__init__.py": b""})
        module = _bundle(eb_env, wheel, "plainpkg", "1.0", [])
        assert "TORCHSTACK" not in _module_text(eb_env, module)
        software = eb_env.installpath / "software" / "plainpkg" / "1.0-pb"
        assert not (software / FINGERPRINT_FILE).exists()


class TestSwap:
    @pytest.mark.parametrize(
        ("consumer", "call", "compatible"),
        [
            ("ext", "import torch, torchstack_demo_ext as e; e.add_one(torch.zeros(1))", False),
            ("toy", "import torchtoy; torchtoy.double(1)", True),
        ],
        ids=["cxx-refused", "python-allowed"],
    )
    def test_swap_to_cuda(self, eb_env: EasyBuildEnv, pb_ext: str, pb_toy: str,
                          cuda_wheels_module: str, consumer: str, call: str,
                          compatible: bool) -> None:
        module = {"ext": pb_ext, "toy": pb_toy}[consumer]
        swap = eb_env.shell(f"module load {module}\nmodule swap PyTorch/2.13.0-pb {CUDA}\n"
                            f"python -c {shlex.quote(call)}")
        assert (swap.returncode == 0) is compatible, swap.stderr
        if not compatible:
            assert module in swap.stderr
