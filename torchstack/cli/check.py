"""`torchstack check PROVIDER CONSUMER`: exit 0 when compatible, 1 when not, with the reason."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.fingerprint.read import Fingerprint
    from torchstack.symbolcheck import SymbolCheck

NAME = "check"
HELP = "tell whether a torch provider satisfies a consumer (exit 0 yes, 1 no)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", metavar="PROVIDER", help="path or fingerprint JSON file")
    parser.add_argument("consumer", metavar="CONSUMER", help="path or fingerprint JSON file")


def execute(args: argparse.Namespace) -> int:
    from torchstack.fingerprint.compat import (
        check,  # here, not above: the parser stays cheap to build
    )

    provider, consumer = load(args.provider), load(args.consumer)
    verdict = check(provider, consumer, _symbols(args, provider, consumer))
    print(verdict.line())
    return 0 if verdict.compatible else 1


def _symbols(args: argparse.Namespace, provider: Fingerprint,
             consumer: Fingerprint) -> SymbolCheck | None:
    """The symbol check, where both sides are at hand as files (not fingerprint JSON)."""
    from torchstack.symbolcheck import verify_paths

    if _is_json(args.provider) or _is_json(args.consumer) or consumer.role != "consumer" \
            or provider.role != "provider" or consumer.link == "python":
        return None
    return verify_paths(args.provider, args.consumer, consumer.name,
                        f"torch {provider.version}")


def _is_json(argument: str) -> bool:
    import os

    return argument.endswith(".json") and os.path.lexists(argument) \
        and not os.path.isdir(argument)


def load(argument: str) -> Fingerprint:
    """A fingerprint from a JSON file (as `fingerprint --json` writes it) or from a path.

    A `*.json` that is there and is no folder is read as JSON (a FIFO or a symlink loop so
    named is refused as what it is); its fingerprint is validated against the contract.
    """
    from torchstack.fingerprint.fromjson import load_fingerprint
    from torchstack.fingerprint.read import fingerprint_path

    if _is_json(argument):
        return load_fingerprint(argument)
    return fingerprint_path(argument)
