"""The root of torchstack's exceptions; each concept module derives its own."""

from __future__ import annotations


class TorchstackError(Exception):
    """Bad input or an environment torchstack cannot work with; the CLI prints it as one line."""
