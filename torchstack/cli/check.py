"""`torchstack check PROVIDER CONSUMER`: exit 0 when compatible, 1 when not, with the reason."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.fingerprint import Fingerprint

NAME = "check"
HELP = "tell whether a torch provider satisfies a consumer (exit 0 yes, 1 no)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", metavar="PROVIDER", help="path or fingerprint JSON file")
    parser.add_argument("consumer", metavar="CONSUMER", help="path or fingerprint JSON file")


def execute(args: argparse.Namespace) -> int:
    from torchstack.compat import check  # here, not above: the parser stays cheap to build

    verdict = check(load(args.provider), load(args.consumer))
    print(verdict.line())
    return 0 if verdict.compatible else 1


def load(argument: str) -> Fingerprint:
    """A fingerprint from a JSON file (as `fingerprint --json` writes it) or from a path.

    A `*.json` that is there and is no folder is read as JSON (a FIFO or a symlink loop so
    named is refused as what it is); its fingerprint is validated against the contract.
    """
    import os

    from torchstack.fingerprint import fingerprint_path
    from torchstack.fingerprint_json import load_fingerprint

    if argument.endswith(".json") and os.path.lexists(argument) and not os.path.isdir(argument):
        return load_fingerprint(argument)
    return fingerprint_path(argument)
