"""PyTorchWheels with the real CUDA 13 stack of torch 2.14.1: CUDA libraries as wheels or modules.

Heavy: the wheels are about 3 GB and the wheel-based install about 5 GB. Built once per session.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cudastack import PYTHON_WHEELS, write_module
from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.ebmodules import stage_wheels

from torchstack.fingerprint.read import fingerprint_path

Factory = Callable[[str], Path]
NMS = ("import torch, torchvision; from torchvision.ops import nms; "
       "b = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [50., 50., 60., 60.]]); "
       "print(nms(b, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist())")


def _modules_easyconfig(eb_env: EasyBuildEnv, cuda_stack: dict[str, Path],
                        modules: list[tuple[str, str]], suffix: str) -> Path:
    return wheel_easyconfig(
        eb_env.root / f"PyTorch-2.14.1{suffix}.eb", "PyTorch", "2.14.1",
        stage_wheels(eb_env, "PyTorch", [cuda_stack[n] for n in PYTHON_WHEELS]),
        dependencies=list(modules),
        versionsuffix=suffix, extra="cuda_libs = 'modules'\n",
    )


class TestCudaLibsWheels:
    def test_torch_imports_with_nvidia_wheels(self, eb_env: EasyBuildEnv,
                                              cuda_wheels_module: str) -> None:
        run = eb_env.shell(f"module load {cuda_wheels_module}\n"
                           "python -c 'import torch; print(torch.version.cuda)'\n"
                           "echo ABI=$TORCHSTACK_TORCH_ABI")
        assert run.returncode == 0, run.stderr
        assert "13.0" in run.stdout
        assert "ABI=torch-2.14.1-cxx11-cu13" in run.stdout

    def test_torchvision_stable_on_top(self, eb_env: EasyBuildEnv,
                                       torchvision_stable_module: str) -> None:
        run = eb_env.shell(f"module load {torchvision_stable_module}\npython -c '{NMS}'")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "[0, 2]"
        recorded = fingerprint_path(eb_env.installpath / "software/torchvision/0.29.1-whl")
        assert recorded.abi_tag == "torch-2.14.0-stable-cu13"


class TestCudaLibsModules:
    def test_matching_modules(self, eb_env: EasyBuildEnv, cuda_stack: dict[str, Path],
                              cuda_modules: list[tuple[str, str]], tmp_path: Path) -> None:
        # an install path of its own, removed once the test passes: its torch libraries have
        # their own RPATHs, 1.5 GB that no other install shares
        env = EasyBuildEnv(tmp_path / "eb", eb_env.python_root).setup()
        shutil.copytree(eb_env.site_modules, env.site_modules, dirs_exist_ok=True)
        suffix = "-CUDA-modules-whl"
        result = env.eb(_modules_easyconfig(env, cuda_stack, cuda_modules, suffix))
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        run = env.shell(
            f"module load PyTorch/2.14.1{suffix}\n"
            "python -c 'import torch; print(torch.version.cuda)'\n"
            "python -m pip check\n"
            "python -c 'import torch; print(open(\"/proc/self/maps\").read())' | grep -c libcublas"
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "No broken requirements found." in run.stdout
        provided = env.installpath / "software/PyTorch" / f"2.14.1{suffix}"
        stand_in = next(provided.glob("lib/python*/site-packages/nvidia_cudnn_cu13-*.dist-info"))
        assert (stand_in / "PROVIDED_BY").read_text().startswith("cuDNN/9.24.0.43 ")
        assert not list(provided.glob("lib/python*/site-packages/nvidia/cudnn"))

    @pytest.mark.parametrize(
        ("version", "soname", "message"),
        [
            ("9.1.0", "libcudnn.so.9", "module cuDNN/9.1.0 provides libcudnn 9.1.0, older than"),
            ("8.9.7", "libcudnn.so.8", "module cuDNN/8.9.7 provides libcudnn 8.9.7, another major"),
        ],
        ids=["older-minor", "other-major"],
    )
    def test_mismatched_cudnn(self, eb_env: EasyBuildEnv, cuda_stack: dict[str, Path],
                              cuda_modules: list[tuple[str, str]], tmp_path: Path,
                              version: str, soname: str, message: str) -> None:
        root = tmp_path / "cuDNN"
        (root / "lib").mkdir(parents=True)
        (root / "stub.c").write_text("int cudnn_stub;\n")
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}",
                        "-o", str(root / "lib" / soname), str(root / "stub.c")], check=True)
        modules = [(n, v) for n, v in cuda_modules if n != "cuDNN"]
        modules.append(("cuDNN", version))
        write_module(eb_env.site_modules, "cuDNN", version, root)
        result = eb_env.eb(_modules_easyconfig(eb_env, cuda_stack, modules, f"-cudnn{version}-whl"))
        assert result.returncode != 0
        assert "torch pins nvidia-cudnn-cu13==9.24.0.43; " + message in result.stdout
