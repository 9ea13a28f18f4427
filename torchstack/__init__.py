"""torchstack: PyTorch software stacks for EasyBuild and Lmod."""

from __future__ import annotations

from torchstack.errors import TorchstackError

__version__ = "0.1.0"
__all__ = ["TorchstackError", "__version__"]
