"""What each generated module is: its EasyBuild name, homepage and description, for torch,
its companions and the Triton wheels (one module name, Triton, whichever variant's)."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import canonicalize_name

from torchstack import variants


@dataclass(frozen=True)
class About:
    """The module name and the words an easyconfig says about a project."""

    module: str
    homepage: str
    description: str


_ABOUT = {
    "torch": About("PyTorch", "https://pytorch.org/",
                   "PyTorch: tensors and dynamic neural networks in Python with strong GPU "
                   "acceleration."),
    "torchvision": About("torchvision", "https://github.com/pytorch/vision",
                         "Datasets, transforms and models specific to computer vision."),
    "torchaudio": About("torchaudio", "https://github.com/pytorch/audio",
                        "Data manipulation and transformation for audio signal processing."),
    "triton": About("Triton", "https://triton-lang.org/",
                    "Triton: a language and compiler for writing highly efficient custom deep "
                    "learning primitives."),
}
TORCH = _ABOUT["torch"].module
TRITON = _ABOUT["triton"].module


def about(project: str) -> About:
    """The module of `project` (a PEP 503 name); KeyError for a project torchstack does not
    generate a module of."""
    return _ABOUT["triton" if variants.is_triton(project) else canonicalize_name(project)]
