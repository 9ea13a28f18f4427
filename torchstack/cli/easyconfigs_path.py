"""`torchstack easyconfigs-path`: the shipped easyconfigs, for `eb --robot=$(...)`."""

from __future__ import annotations

import argparse

NAME = "easyconfigs-path"
HELP = ("print the folder of the shipped easyconfigs, for "
        'eb --robot="$(torchstack easyconfigs-path)"')


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def execute(args: argparse.Namespace) -> int:
    from torchstack.paths import easyconfigs_path

    print(easyconfigs_path())
    return 0
