"""`torchstack lmod-sitepackage`: the SitePackage.lua whose finalize hook guards a whole site.

The hook refuses a loaded module whose fingerprint file exists but cannot be read (no regular
file, over 64 KiB, not strict JSON, nested over 16 deep, wrong fields), naming the file: what
cannot be checked is never taken as safe (torchstack.guards.sitepackage).
"""

from __future__ import annotations

import argparse

NAME = "lmod-sitepackage"
HELP = "print a SitePackage.lua that refuses unsafe PyTorch mixes site-wide (LMOD_PACKAGE_PATH)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def execute(args: argparse.Namespace) -> int:
    from torchstack.guards.halves import sitepackage_lua

    print(sitepackage_lua(), end="")
    return 0
