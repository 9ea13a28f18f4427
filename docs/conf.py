"""Sphinx configuration of the torchstack guides (the default theme, no extension)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torchstack import __version__

project = "torchstack"
version = release = __version__
exclude_patterns = ["_build"]
html_theme = "alabaster"
