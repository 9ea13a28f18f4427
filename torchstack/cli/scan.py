"""`torchstack scan INSTALLPATH [--swap FROM TO] [--json] [--record]`: an install path's modules.

Without --swap: a table of every module (module, role, abi tag, the PyTorch module it runs
on). With --swap: the consumers of FROM that TO would break and those it spares, each with its
reason, and the modules on FROM that could not be checked; exit 0 when none breaks and all were
checked, 1 otherwise. --json prints the same as data. With --record: the fingerprints read on
the fly are written into their installations. A module whose installation cannot be read is
"unknown" with the reason, never "no torch" nor safe: the listing and --record exit 1 then, as
they do when a folder of module files cannot be listed. A consumer whose PyTorch cannot be
told (a load that names no module, no PyTorch among its loads) runs on "unknown", with the
reason under the table, and is not checked in a swap: the swap is not safe.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.guards.scan import InstalledModule, NotChecked, Scan, SwapOutcome, SwapReport

NAME = "scan"
HELP = ("list the modules of an EasyBuild install path with their torch fingerprints; "
        "with --swap, which consumers a PyTorch swap would break (exit 1 if any)")
SCANNED_NOTE = "* not recorded by the installation: fingerprinted on the fly"
UNKNOWN_NOTE = "unknown: its installation cannot be read, so it is not checked:"
UNDETERMINED_NOTE = "runs on unknown: the PyTorch it runs on cannot be told, so it is not checked:"
UNLISTED_NOTE = "folders of module files that cannot be listed:"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("installpath", metavar="INSTALLPATH",
                        help="EasyBuild install path (holds modules/all and software)")
    parser.add_argument("--swap", nargs=2, metavar=("FROM", "TO"),
                        help="PyTorch module full names, e.g. PyTorch/2.13.0-whl "
                             "PyTorch/2.14.1-CUDA-13.0-whl")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--record", action="store_true",
                        help="write the fingerprints read on the fly into their installations "
                             "(for modules that predate torchstack and the SitePackage hook)")


def execute(args: argparse.Namespace) -> int:
    import json  # here, not above: building the parser stays cheap for every subcommand

    from torchstack.guards.scan import plan_swap, record_scanned, scan_installpath

    found = scan_installpath(args.installpath)
    complete = 0 if not found.unknown() and not found.problems else 1
    if args.record:
        for module in record_scanned(found):
            tag = module.fingerprint.abi_tag if module.fingerprint else "-"
            print(f"recorded {module.name}: {tag} in {module.software}")
        for module in found.unknown():
            print(f"not recorded {module.name}: {module.unreadable}")
        return complete
    if args.swap is None:
        print(json.dumps(found.to_json(), indent=2) if args.json else table(found))
        return complete
    report = plan_swap(found, args.swap[0], args.swap[1])
    print(json.dumps(report.to_json(), indent=2) if args.json else describe_swap(report))
    return 0 if report.safe else 1


def table(scan: Scan) -> str:
    """One row a module: module, role, abi tag, the PyTorch module it runs on."""
    if not scan.modules:
        return f"{scan.installpath}: no module files in modules/all"
    rows = [("MODULE", "ROLE", "ABI TAG", "RUNS ON")] + [_row(m) for m in scan.modules]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, [*widths, 0])).rstrip()
             for row in rows]
    if any(m.source == "scanned" for m in scan.modules):
        lines.append(SCANNED_NOTE)
    if scan.unknown():
        lines += [UNKNOWN_NOTE, *(f"  {m.name}: {m.unreadable}" for m in scan.unknown())]
    undetermined = [m for m in scan.modules if m.undetermined and m.runs_on is None]
    if undetermined:
        lines += [UNDETERMINED_NOTE, *(f"  {m.name}: {m.undetermined}" for m in undetermined)]
    if scan.problems:
        lines += [UNLISTED_NOTE, *(f"  {folder}: {why}" for folder, why in scan.problems)]
    return "\n".join(lines)


def _row(module: InstalledModule) -> tuple[str, str, str, str]:
    found = module.fingerprint
    if found is None:
        return module.name, module.role, "-", module.runs_on or "-"
    role = f"consumer ({found.link})" if found.role == "consumer" else found.role
    tag = found.abi_tag + (" *" if module.source == "scanned" else "")
    runs_on = "-" if found.role == "provider" else module.runs_on or "unknown"
    return module.name, role, tag, runs_on


def describe_swap(report: SwapReport) -> str:
    """A heading, then the groups "would break (rebuild):" and "stays safe:" with reasons,
    and "not checked" with the modules that may run on FROM but cannot be read."""
    count = len(report.would_break) + len(report.stays_safe)
    unknown = len(report.not_checked)
    lines = [
        f"swap {_named(report.source)} -> {_named(report.target)}: "
        f"{count} consumer module{'' if count == 1 else 's'} run{'s' if count == 1 else ''} "
        f"on {report.source.name}"
        + (f", {unknown} more not checked" if unknown else ""),
        "would break (rebuild):",
        *_group(report.would_break),
        "stays safe:",
        *_group(report.stays_safe),
    ]
    if report.not_checked:
        lines += ["not checked (not safe):",
                  *_unchecked(report.not_checked)]
    return "\n".join(lines)


def _named(module: InstalledModule) -> str:
    tag = module.fingerprint.abi_tag if module.fingerprint is not None else "no torch"
    return f"{module.name} ({tag})"


def _group(outcomes: tuple[SwapOutcome, ...]) -> list[str]:
    return [f"  {o.module}: {o.verdict.line()}" for o in outcomes] or ["  (none)"]


def _unchecked(modules: tuple[NotChecked, ...]) -> list[str]:
    return [f"  {m.module}: {m.reason}" for m in modules]
