"""`torchstack classify RELEASE --with PROJECT[SPEC] ... [--with-file FILE]`: each torch
consumer a site carries, resolved for a torch release and classified before install.

The generator's resolver in report mode (torchstack.generator.siteprojects): per variant of
the release that the index offers and per Python, each project's newest release that runs on
that torch, walking back at most --walk-back releases, with the releases passed over and why.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torchstack.cli._args import positive_int

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
    parser.add_argument("--variant", action="append", dest="variants", metavar="V",
                        help="torch variant: cpu, cu128, ... (repeatable; default: all offered)")
    parser.add_argument("--walk-back", type=positive_int, default=None, metavar="N",
                        help="releases of each project to try, newest first (default 12)")


def execute(args: argparse.Namespace) -> int:
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    from torchstack.errors import TorchstackError
    from torchstack.generator import siteprojects
    from torchstack.generator.release import Request, Resolver
    from torchstack.index import consumers
    from torchstack.index.simple import SimpleIndex

    try:
        Version(args.release)
        pythons = [_python(text) for text in args.python or ["3.13"]]
    except (InvalidVersion, ValueError) as exc:
        raise TorchstackError(f"{exc}") from exc
    requirements = consumers.parse_projects(args.projects, args.files)
    if not requirements:
        raise TorchstackError("no project named: give --with PROJECT or --with-file FILE")
    resolver = Resolver([SimpleIndex(args.index)])
    walk_back = args.walk_back or siteprojects.WALK_BACK
    complete = True
    for python in pythons:
        request = Request(args.release, python, tuple(args.arch or ("x86_64", "aarch64")),
                          tuple(args.variants or ()))
        for variant_set in resolver.resolve(request):
            where = f"{variant_set.variant}, Python {request.python_version}"
            targets = [t for t in request.targets() if t.arch in variant_set.torch.wheels]
            for requirement in requirements:
                found = siteprojects.resolve(resolver, Requirement(str(requirement)),
                                             variant_set.torch, variant_set.variant, targets,
                                             walk_back)
                complete = complete and found.resolved is not None and not any(
                    "not built" in note for note in found.notes)
                if found.resolved is not None:
                    print(f"{found.abi} ({where})")
                for note in found.notes:
                    print(f"{note} ({where})")
    return 0 if complete else 1




def _python(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"--python {text!r} is not X.Y")
    return int(major), int(minor)
