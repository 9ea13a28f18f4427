"""User venvs on top of a loaded PyTorch module, which never replace the module's torch.

`torchstack venv DIR` (create.py) makes a venv on the module's Python with the module's
site-packages visible, pins every distribution the loaded modules provide in a constraints
file that the venv's own pip.conf names (pins.py), records the modules it was made on
(torchstack.doctor.venvrecord, which doctor reads back), warns on activation when they are
not loaded (activate.py), and gives the module's console scripts a copy run by the venv's
Python (scripts.py). Before anything is written, it refuses a path that the venv's files
would mangle (paths.py) and a Python that cannot run the module's torch (python.py).
"""

from __future__ import annotations

from torchstack.errors import TorchstackError


class VenvError(TorchstackError):
    """A venv that cannot be made here: DIR in use, no PyTorch module loaded, venv failed."""


__all__ = ["VenvError"]
