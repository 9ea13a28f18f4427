"""suffixes: EasyBuild version suffixes of generated modules."""

from __future__ import annotations

import pytest

from torchstack.generator import suffixes


@pytest.mark.parametrize(("cuda", "suffix"), [
    (None, "-whl"),                     # CPU (and ROCm, XPU) sets
    ("12.8.0", "-CUDA-12.8.0-whl"),     # upstream's spelling of a CUDA -whl module
])
def test_wheels(cuda: str | None, suffix: str) -> None:
    assert suffixes.wheels(cuda) == suffix


def test_cuda() -> None:
    assert suffixes.cuda("12.8.0") == "-CUDA-12.8.0"
