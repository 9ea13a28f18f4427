"""`torchstack classify RELEASE --with PROJECT[SPEC] ... [--with-file FILE]`: each torch
consumer a site carries, resolved for a torch release and classified before install."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "classify"
HELP = "resolve a site's torch consumers for a torch release and predict how each links torch"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("release", metavar="RELEASE", help="the torch release, e.g. 2.14.1")
    parser.add_argument("--with", dest="projects", action="append", default=[],
                        metavar="PROJECT[SPEC]", help="a consumer project (repeatable)")
    parser.add_argument("--with-file", dest="files", action="append", default=[], type=Path,
                        metavar="FILE", help="a file of consumer projects, one a line")
    parser.add_argument("--index", default="https://pypi.org/simple/", metavar="URL",
                        help="the index to ask (default: PyPI)")
    parser.add_argument("--python", action="append", metavar="X.Y",
                        help="target Python (repeatable; default 3.13)")
    parser.add_argument("--arch", action="append", choices=("x86_64", "aarch64"),
                        help="target architecture (repeatable; default both)")


def execute(args: argparse.Namespace) -> int:
    from packaging.version import InvalidVersion, Version

    from torchstack.errors import TorchstackError
    from torchstack.index import consumers
    from torchstack.index.simple import SimpleIndex

    try:
        torch = Version(args.release)
        pythons = [_python(text) for text in args.python or ["3.13"]]
    except (InvalidVersion, ValueError) as exc:
        raise TorchstackError(f"{exc}") from exc
    requirements = consumers.parse_projects(args.projects, args.files)
    if not requirements:
        raise TorchstackError("no project named: give --with PROJECT or --with-file FILE")
    targets = [consumers.Target(p, a) for p in pythons for a in args.arch or ("x86_64", "aarch64")]
    index = SimpleIndex(args.index)
    found = consumers.resolve_all(index, requirements, torch, targets)
    for resolved in found:
        print(resolved.line(torch))
    return 1 if any(r.prediction is None for r in found) else 0


def _python(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"--python {text!r} is not X.Y")
    return int(major), int(minor)
