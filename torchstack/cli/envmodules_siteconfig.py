"""`torchstack envmodules-siteconfig`: the siteconfig.tcl hook for Environment Modules 5.

With it, a `module switch` or `module restore` that a torchstack guard refuses is refused
whole, as under Lmod, instead of going on without the refused module
(torchstack.guards.siteconfig).
"""

from __future__ import annotations

import argparse

NAME = "envmodules-siteconfig"
HELP = ("print a siteconfig.tcl that makes Environment Modules refuse an unsafe PyTorch switch "
        "whole (MODULES_SITECONFIG)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def execute(args: argparse.Namespace) -> int:
    from torchstack.guards.siteconfig import siteconfig_tcl

    print(siteconfig_tcl(), end="")
    return 0
