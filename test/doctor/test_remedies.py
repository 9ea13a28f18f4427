"""torchstack.doctor.remedies: the fix for a missing library, from torch's real CUDA pins."""

from __future__ import annotations

import pytest
from support.doctorenv import (
    CUDNN_FIX,
    Factory,
)

from torchstack.distributions import tree_distributions
from torchstack.doctor.remedies import library_fix
from torchstack.fingerprint.read import Fingerprint, provider_fingerprint


class TestLibraryFix:
    @pytest.fixture(scope="class")
    def cuda_torch(self, real_tree: Factory) -> tuple[Fingerprint, tuple[str, ...]]:
        dist = next(d for d in tree_distributions(real_tree("torch-2.14.1")) if d.key == "torch")
        return provider_fingerprint(dist), dist.requires_dist

    @pytest.mark.parametrize(("soname", "fix"), [
        ("libcudnn.so.9", CUDNN_FIX),
        # a sub-library of cuDNN: the longest matching stem decides
        ("libcudnn_cnn.so.9", CUDNN_FIX),
        # cuBLASLt comes with the cuBLAS wheel, which the cuda-toolkit extra pulls in
        ("libcublasLt.so.13", 'load CUDA/13.x or pip install "cuda-toolkit[cublas]==13.0.3"'),
        ("libnvshmem_host.so.3", "load NVSHMEM/3.x or pip install nvidia-nvshmem-cu13==3.4.5"),
        # not of the CUDA ecosystem
        ("libfoo.so.1", "load the module that provides libfoo.so.1, or add the folder that "
                        "holds it to LD_LIBRARY_PATH"),
    ], ids=["cudnn", "cudnn-sub", "cublaslt", "nvshmem", "unknown"])
    def test_cuda_torch(self, cuda_torch: tuple[Fingerprint, tuple[str, ...]], soname: str,
                        fix: str) -> None:
        provider, requires = cuda_torch
        assert library_fix(soname, provider, requires, "3.11") == fix

    def test_without_pins_only_the_module(self) -> None:
        # a consumer's CUDA runtime, no torch metadata to pin a wheel: the soname's major
        assert library_fix("libcudart.so.13", None, (), "3.11") == "load CUDA/13.x"

    def test_torch_library_without_torch(self) -> None:
        assert library_fix("libc10.so", None, (), "3.11") == \
            "load a PyTorch module, or pip install torch"
