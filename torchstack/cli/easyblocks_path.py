"""`torchstack easyblocks-path`: the folder for `eb --include-easyblocks="$(...)/*.py"`."""

from __future__ import annotations

import argparse

NAME = "easyblocks-path"
HELP = (
    'print the easyblocks folder, for eb --include-easyblocks="$(torchstack easyblocks-path)/*.py"'
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def execute(args: argparse.Namespace) -> int:
    from torchstack.paths import easyblocks_path

    print(easyblocks_path())
    return 0
