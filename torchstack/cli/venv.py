"""`torchstack venv DIR [--python PYTHON]`: a user venv on top of the loaded PyTorch modules.

The venv is made by the module's Python (`python3` on PATH, as the loaded Python module
puts it there) with --system-site-packages; pip in it resolves against pins of every
distribution the loaded modules provide, so `pip install X` keeps the module's torch or
fails naming the conflict. Exit 0 when made, 2 on bad input (DIR in use or a path the venv's
files would mangle, no PyTorch loaded, a Python that cannot run the module's torch).
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

NAME = "venv"
HELP = ("make a venv on the loaded PyTorch module's Python whose pip never replaces the "
        "module's torch")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", type=Path,
                        help="the venv to make (absent or an empty folder)")
    parser.add_argument("--python", metavar="PYTHON", default="python3",
                        help="the module's Python (default: python3 on PATH)")


def execute(args: argparse.Namespace) -> int:
    from torchstack.doctor.interpreter import query
    from torchstack.doctor.venvrecord import CONSTRAINTS, PIP_CONF
    from torchstack.venv.create import create, plan

    environ = dict(os.environ)
    made = plan(args.dir, query(args.python, environ), environ)
    scripts = create(made, environ)
    torch = next((p.line for p in made.pins if p.name.lower() == "torch"), "torch")
    print(f"venv {made.target} on {made.interpreter.executable} "
          f"(modules: {' '.join(made.modules)})")
    print(f"pins: {len(made.pins)} distributions ({torch}, ...) in "
          f"{made.target / CONSTRAINTS}, read by pip through {made.target / PIP_CONF}")
    if scripts:
        print(f"console scripts run by the venv's Python: {' '.join(scripts)}")
    print(f"activate: source {shlex.quote(str(made.target / 'bin' / 'activate'))}")
    return 0
