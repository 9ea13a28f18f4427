"""`torchstack rollout {plan,promote,rollback} INSTALLPATH FROM TO`: a source build as default.

FROM is the wheel PyTorch module, TO the source-built one of the same release.
- plan: each consumer of FROM with what it needs on TO (installed, rebuild, reinstall or
  blocked) and why; with --out, the switched easyconfigs and one easystack in dependency
  order, and the commands that build them. Exit 0 when TO can be promoted, 1 otherwise.
- promote: once every consumer has a safe installation on TO (recorded fingerprints), the
  module defaults of PyTorch and of each consumer name point at the source stack; before
  that, the list of what is missing and exit 1.
- rollback: the module defaults point at the wheel stack again.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.guards.scan import Scan
    from torchstack.rollout.plan import Plan, Step

NAME = "rollout"
HELP = ("promote a source-built PyTorch over the wheel stack of the same release: plan and "
        "write the consumers' easyconfigs, then switch the module defaults (or back)")
GROUPS = (
    ("rebuild", "rebuild (its binaries break on {to}):"),
    ("reinstall", "reinstall (runs on {to} as built; its module loads {frm}):"),
    ("installed", "installed on {to}:"),
    ("blocked", "blocked (no easyconfig written):"),
)


# A version suffix starts with a dash (`--suffix -src`, as EasyBuild writes `-CUDA-12.8.0`):
# argparse takes such a value for an option unless it "looks like a negative number". Here
# any single-dash word that names no option does, so `--suffix -src` and `--suffix=-src` both
# work; `-h` and every option of this command are still found first.
_DASHED_VALUE = re.compile(r"^-[^-]")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser._negative_number_matcher = _DASHED_VALUE
    parser.add_argument("action", choices=("plan", "promote", "rollback"),
                        help="plan (and write easyconfigs), promote TO, or roll back to FROM")
    parser.add_argument("installpath", metavar="INSTALLPATH",
                        help="EasyBuild install path (holds modules/all and software)")
    parser.add_argument("source", metavar="FROM", help="the wheel PyTorch module, e.g. "
                        "PyTorch/2.9.1-foss-2025a-CUDA-12.8.0-whl")
    parser.add_argument("target", metavar="TO", help="the source-built PyTorch module, e.g. "
                        "PyTorch/2.9.1-foss-2025a-CUDA-12.8.0")
    parser.add_argument("--suffix", metavar="SUFFIX",
                        help="the ending of the consumers' version suffix on TO, in place of "
                             "FROM's (default: TO's version suffix)")
    parser.add_argument("--out", metavar="DIR",
                        help="plan: write the consumers' easyconfigs and an easystack here")
    parser.add_argument("--force", action="store_true",
                        help="plan: replace easyconfigs that --out already holds")
    parser.add_argument("--json", action="store_true", help="plan: print the plan as JSON")


def execute(args: argparse.Namespace) -> int:
    from torchstack.guards.scan import scan_installpath
    from torchstack.rollout.plan import plan_rollout

    scan = scan_installpath(args.installpath)
    if args.action == "rollback":  # needs FROM only: TO may be gone or damaged
        return _rollback(scan, args.source, args.target)
    plan = plan_rollout(scan, args.source, args.target, args.suffix)
    if args.action == "promote":
        return _promote(plan)
    if args.out:
        _write(plan, Path(args.out), args.force, quiet=args.json)
    if args.json:
        import json

        print(json.dumps(plan.to_json(), indent=2))
    else:
        print(describe(plan))
    return 0 if plan.ready else 1


def describe(plan: Plan) -> str:
    """A heading, one group of consumers a step, what could not be checked, the verdict."""
    frm, to = plan.source.name, plan.target.name
    lines = [f"promote {to} ({_tag(plan, to)}) over {frm} ({_tag(plan, frm)}): "
             f"{len(plan.steps)} consumer module{'' if len(plan.steps) == 1 else 's'}"]
    for action, heading in GROUPS:
        steps = [s for s in plan.steps if s.action == action]
        if steps:
            lines += [heading.format(to=to, frm=frm), *(_line(s) for s in steps)]
    if plan.not_checked:
        lines += ["not checked (its installation cannot be read):",
                  *(f"  {n.module}: {n.reason}" for n in plan.not_checked)]
    if plan.ready:
        lines.append(f"ready: every consumer has a safe installation on {to}")
    else:
        count = len(plan.missing) + len(plan.not_checked)
        lines.append(f"not ready: {count} consumer module{'' if count == 1 else 's'} "
                     f"without a safe installation on {to}")
    return "\n".join(lines)


def _line(step: Step) -> str:
    arrow = f" -> {step.target}" if step.target else ""
    return f"  {step.module}{arrow}: {step.reason}"


def _tag(plan: Plan, name: str) -> str:
    module = plan.source if name == plan.source.name else plan.target
    return module.fingerprint.abi_tag if module.fingerprint is not None else "no torch"


def _write(plan: Plan, folder: Path, force: bool, quiet: bool) -> None:
    """The switched easyconfigs and the easystack that builds them in order."""
    from torchstack import output
    from torchstack.generator import jobs, render
    from torchstack.generator.plan import build_command
    from torchstack.rollout.recipes import switched

    steps = plan.to_build()
    if not steps:
        if not quiet:
            print(f"nothing to build: no easyconfig written to {folder}")
        return
    replace = plan.replacements()
    files = dict(switched(s.recipe, s.suffix, replace) for s in steps
                 if s.recipe is not None and s.suffix is not None)
    stack = f"easystack-rollout-{plan.target.name.replace('/', '-')}.yaml"
    files[stack] = render.easystack(f"consumers of {plan.source.name} on {plan.target.name}",
                                    build_command(stack), list(files))
    replaced = output.write_set(folder, files, force=force)
    if quiet:
        return
    cd = f"cd {shlex.quote(str(folder.absolute()))}"
    for name in files:
        print(f"{'replaced' if name in replaced else 'written'} {folder / name}")
    print("# build on this host, or as Slurm jobs (one per easyconfig):")
    print(f"{cd} && {build_command(stack)}")
    print(f"{cd} && {jobs.submit_command(stack, [n for n in files if n != stack])}")


def _promote(plan: Plan) -> int:
    import sys

    from torchstack.rollout.defaults import promoted, write_defaults

    if not plan.ready:
        print(f"torchstack: cannot promote {plan.target.name}: "
              f"{len(plan.missing) + len(plan.not_checked)} consumer module(s) of "
              f"{plan.source.name} have no safe installation on it:", file=sys.stderr)
        for step in plan.missing:
            print(_line(step), file=sys.stderr)
        for unknown in plan.not_checked:
            print(f"  {unknown.module}: not checked: {unknown.reason}", file=sys.stderr)
        return 1
    pair = (plan.source.name, plan.target.name)
    for path in write_defaults(plan.installpath, promoted(plan), pair):
        print(f"{'written' if path.exists() else 'removed'} {path}")
    print(f"promoted {plan.target.name} over {plan.source.name}")
    return 0


def _rollback(scan: Scan, source: str, target: str) -> int:
    from torchstack.rollout.defaults import rolled_back, write_defaults

    for path in write_defaults(scan.installpath, rolled_back(scan, source), (source, target)):
        print(f"{'written' if path.exists() else 'removed'} {path}")
    print(f"rolled back to {source}")
    return 0
