"""`torchstack doctor [--json] [--import] [--python PYTHON]`: diagnose a PyTorch environment.

Inspects the environment of the running Python (or of --python; in an activated venv made by
`torchstack venv`, that venv's Python) without importing torch:
which torch is active, its consumers and whether they fit it, where every library they need
resolves, JIT build readiness, venv and module shadowing. Human output groups the findings
by severity, each with its fix on the next line; --json prints the same as data. Exit 0
when healthy, 1 when problems were found, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.doctor import Interpreter, Report
    from torchstack.doctor.libraries import LibraryUse

NAME = "doctor"
HELP = ("diagnose the PyTorch environment of this Python: active torch, consumers, libraries, "
        "JIT readiness, venv shadowing (exit 0 healthy, 1 problems found)")
_HEADINGS = {"problem": "problems", "warning": "warnings", "info": "info"}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.add_argument("--import", dest="imports", action="store_true",
                        help="also import torch and each consumer (slow; confirms the diagnosis)")
    parser.add_argument("--python", metavar="PYTHON",
                        help="inspect this interpreter's environment instead of the running one's")
    parser.add_argument("--default-cuda-home", metavar="DIR", default=None,
                        help="where torch.utils.cpp_extension looks last for a CUDA toolkit "
                             "(default /usr/local/cuda)")


def execute(args: argparse.Namespace) -> int:
    import json  # here, not above: building the parser stays cheap for every subcommand

    from torchstack.doctor import DEFAULT_CUDA_HOME, diagnose, query

    environ = dict(os.environ)
    interpreter = query(args.python, environ) if args.python else _default(environ)
    report = diagnose(interpreter, environ, imports=args.imports,
                      default_cuda_home=args.default_cuda_home or DEFAULT_CUDA_HOME)
    print(json.dumps(report.to_json(), indent=2) if args.json else describe(report))
    return report.exit_code


def _default(environ: dict[str, str]) -> Interpreter:
    """The running Python, or the activated venv made by `torchstack venv` if another."""
    import sys

    from torchstack.doctor import current, query
    from torchstack.doctor.venvcheck import active_venv_python

    python = active_venv_python(environ, sys.prefix)
    return query(python, environ) if python else current()


def describe(report: Report) -> str:
    """The stack in a few lines, then the findings grouped by severity, fixes indented."""
    from torchstack.doctor.findings import by_severity

    lines = [f"python: {report.interpreter.describe()}", _torch_line(report)]
    lines += _consumer_lines(report)
    lines += _library_lines(report.libraries)
    for severity, findings in by_severity(report.findings).items():
        if not findings:
            continue
        lines.append(f"{_HEADINGS[severity]} ({len(findings)}):")
        for finding in findings:
            lines.append(f"  {finding.message}")
            if finding.fix:
                lines.append(f"      fix: {finding.fix}")
    lines.append(_summary(report))
    return "\n".join(lines)


def _torch_line(report: Report) -> str:
    if report.provider is None:
        return "torch: none found on sys.path"
    return f"torch: {report.provider.version} ({report.provider.abi_tag}) in {report.torch_folder}"


def _consumer_lines(report: Report) -> list[str]:
    lines = []
    for state in report.consumers:
        data = state.to_json()
        verdict = {True: "compatible", False: "INCOMPATIBLE", None: "unknown"}[data["compatible"]]
        lines.append(f"  {data['name']} {data['version']} "
                     f"({state.consumer.fingerprint.link}): {verdict}")
    return ["consumers:", *lines] if lines else []


def _library_lines(uses: tuple[LibraryUse, ...]) -> list[str]:
    from torchstack.doctor.libraries import BASE_SYSTEM

    shown = [u for u in uses if u.source != "torch" and not (
        u.source == "system" and u.name in BASE_SYSTEM)]
    if not shown:
        return []
    width = max(len(u.name) for u in shown)
    return ["libraries:", *(f"  {u.name:<{width}}  {u.where}" for u in shown)]


def _summary(report: Report) -> str:
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("problem", "warning")}
    if counts["problem"] == 0:
        return f"healthy ({counts['warning']} warning{'s' * (counts['warning'] != 1)})"
    return (f"{counts['problem']} problem{'s' * (counts['problem'] != 1)}, "
            f"{counts['warning']} warning{'s' * (counts['warning'] != 1)}")
