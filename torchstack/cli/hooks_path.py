"""`torchstack hooks-path`: the hooks file for `eb --hooks="$(torchstack hooks-path)"`."""

from __future__ import annotations

import argparse

NAME = "hooks-path"
HELP = 'print the EasyBuild hooks file, for eb --hooks="$(torchstack hooks-path)"'


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """No options."""


def execute(args: argparse.Namespace) -> int:
    from torchstack.paths import hooks_path

    print(hooks_path())
    return 0
