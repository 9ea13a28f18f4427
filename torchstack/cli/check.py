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
    """A fingerprint from a JSON file (as `fingerprint --json` writes it) or from a path."""
    import json
    from pathlib import Path

    from torchstack.fingerprint import Fingerprint, FingerprintError, fingerprint_path

    path = Path(argument)
    if path.suffix == ".json" and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FingerprintError(f"{argument!r} is not a fingerprint JSON file: {exc}") from exc
        return Fingerprint.from_json(data)
    return fingerprint_path(path)
