"""projects: the module name and words of each generated project."""

from __future__ import annotations

import pytest

from torchstack.generator import projects


@pytest.mark.parametrize(("project", "module"), [
    ("torch", "PyTorch"),
    ("torchvision", "torchvision"),
    ("torchaudio", "torchaudio"),
    ("triton", "Triton"),
    ("pytorch-triton-rocm", "Triton"),  # one module name whichever variant's Triton
    ("pytorch_triton_xpu", "Triton"),
])
def test_module_names(project: str, module: str) -> None:
    assert projects.about(project).module == module


def test_every_project_has_words() -> None:
    for project in ("torch", "torchvision", "torchaudio", "triton"):
        about = projects.about(project)
        assert about.homepage.startswith("https://")
        assert about.description.endswith(".")


def test_unknown_project() -> None:
    with pytest.raises(KeyError):
        projects.about("numpy")
