"""`torchstack lmod-sitepackage`: the SitePackage.lua whose finalize hook guards a whole site."""

from __future__ import annotations

import argparse

NAME = "lmod-sitepackage"
HELP = "print a SitePackage.lua that refuses unsafe PyTorch mixes site-wide (LMOD_PACKAGE_PATH)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def execute(args: argparse.Namespace) -> int:
    from torchstack.guards import sitepackage_lua

    print(sitepackage_lua(), end="")
    return 0
