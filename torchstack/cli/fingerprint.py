"""`torchstack fingerprint PATH [--json]`: what libtorch a wheel or an installation is or needs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.fingerprint.read import Fingerprint

NAME = "fingerprint"
HELP = "fingerprint a .whl file, a site-packages folder or an install prefix"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help=".whl file, site-packages or prefix")
    parser.add_argument("--json", action="store_true", help="print the fingerprint as JSON")


def execute(args: argparse.Namespace) -> int:
    import json  # here, not above: building the parser stays cheap for every subcommand

    from torchstack.fingerprint.read import fingerprint_path

    found = fingerprint_path(args.path)
    if args.json and found.role == "consumer":  # as recorded, with its guard clauses
        from torchstack.fingerprint import compat

        found = compat.recorded(found)
    print(json.dumps(found.to_json(), indent=2) if args.json else describe(found))
    return 0


def describe(found: Fingerprint) -> str:
    """The fingerprint for people: one fact a line."""
    torch = found.torch
    abi = {True: "C++11 ABI", False: "pre-C++11 ABI", None: "C++ ABI unknown"}[torch.cxx11_abi]
    runtime = f"CUDA {torch.cuda}" if torch.cuda else f"ROCm {torch.hip}" if torch.hip else "CPU"
    local = f"+{torch.local}" if torch.local else ""
    lines = [f"{found.name} {found.version}: {found.role}"]
    if found.role == "consumer":
        lines.append(f"  links        {found.link}")
        lines.append(f"  requires     torch{found.requires_torch or ' (any)'}")
        lines.append(
            f"  built for    torch {torch.release or '(unknown)'}{local}, {abi}, {runtime}"
        )
    else:
        lines.append(f"  torch        {torch.release}{local}, {abi}, {runtime}")
    lines.append(f"  cuda major   {found.cuda_major if found.cuda_major is not None else '-'}")
    lines.append(f"  abi tag      {found.abi_tag}")
    return "\n".join(lines)
