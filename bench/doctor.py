#!/usr/bin/env python3
"""Benchmark `torchstack doctor` against `python -c "import torch"` on the same environment.

Prepares once, cached under ${TORCHSTACK_CACHE:-~/.cache/torchstack}/bench/, a venv with torch
and what it imports, installed by the venv's pip through this machine's pip configuration:
torch 2.13.0+cpu (--torch cpu, the default) or torch 2.14.1 with its nvidia wheels (--torch
cuda, about 5 GB). Then two whole commands run as subprocesses, interleaved in rounds (the
order alternating) after one discarded warm-up round:

  doctor        torchstack doctor --json --python VENV/bin/python
  import torch  VENV/bin/python -c "import torch"

Each run's wall time (time.perf_counter) and peak RSS (os.wait4) are recorded; every doctor
run's JSON is checked to name the venv's torch. The target, doctor faster than the import
(median ratio above 1), is printed with whether it is met, never enforced: the exit code is
0 unless a command fails or doctor reports the wrong torch (then 1).

Usage: python3 bench/doctor.py [--torch cpu|cuda] [--rounds N] [--json]
(with --json, stdout is the JSON alone and the table goes to stderr)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Run, RunStats, log, positive, timed_run

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROUNDS = 7
TARGET_RATIO = 1.0  # import torch / doctor, medians; reported, not enforced
# What each variant installs, and the torch version doctor must report.
VARIANTS = {
    "cpu": (("torch==2.13.0", "numpy"), "2.13.0+cpu"),
    "cuda": (("torch==2.14.1", "numpy"), "2.14.1+cu130"),
}


class BenchError(Exception):
    """Preparation failed, or a command did not run as it should."""


@dataclass(frozen=True)
class Command:
    key: str
    label: str
    argv: tuple[str, ...]


@dataclass
class Series(RunStats):
    command: Command
    runs: list[Run] = field(default_factory=list)


def cache_root() -> Path:
    base = os.environ.get("TORCHSTACK_CACHE") or "~/.cache/torchstack"
    return Path(base).expanduser() / "bench"


def prepare(variant: str) -> Path:
    """The venv's python, made once per variant and interpreter; a marker says it is done."""
    requirements, _ = VARIANTS[variant]
    venv = cache_root() / f"doctor-{variant}-py{sys.version_info[0]}{sys.version_info[1]}"
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    if marker.is_file():
        return python
    log(f"preparing {venv}")
    _check([sys.executable, "-m", "venv", "--clear", str(venv)])
    _check([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            *requirements])
    marker.touch()
    return python


def _check(argv: Sequence[str]) -> None:
    log(f"$ {' '.join(argv)}")
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            check=False)
    if result.returncode != 0:
        raise BenchError(f"{argv[0]} failed ({result.returncode}):\n{result.stdout[-4000:]}")


def commands(python: Path) -> list[Command]:
    return [
        Command("doctor", "torchstack doctor",
                (sys.executable, "-m", "torchstack", "doctor", "--json", "--python", str(python))),
        Command("import_torch", "import torch", (str(python), "-c", "import torch")),
    ]


def run_once(command: Command) -> Run:
    """Run to the end from the repository, bytecode caches kept (steady state)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return timed_run(command.argv, env, cwd=REPO)


def checked(command: Command, run: Run, expected_torch: str) -> Run:
    """Doctor may exit 1 (problems found, e.g. no GPU toolkit); never 2, never wrong torch."""
    allowed = (0, 1) if command.key == "doctor" else (0,)
    if run.returncode not in allowed:
        raise BenchError(f"{command.label} exited {run.returncode}: {' '.join(command.argv)}\n"
                         f"{run.stderr[-4000:]}")
    if command.key == "doctor":
        torch = (json.loads(run.stdout).get("torch") or {}).get("version")
        if torch != expected_torch:
            raise BenchError(f"doctor reports torch {torch!r}, expected {expected_torch!r}")
    return run


def measure(cmds: list[Command], rounds: int, expected_torch: str) -> list[Series]:
    series = [Series(c) for c in cmds]
    for number in range(rounds + 1):
        order = series if number % 2 == 0 else series[::-1]
        for entry in order:
            run = checked(entry.command, run_once(entry.command), expected_torch)
            if number == 0:
                log(f"warm-up {entry.command.label}: {run.seconds:.3f} s")
            else:
                entry.runs.append(run)
    return series


def figures(series: list[Series], python: Path, variant: str, rounds: int) -> dict[str, Any]:
    by_key = {s.command.key: s for s in series}
    ratio = by_key["import_torch"].median / by_key["doctor"].median
    return {
        "variant": variant,
        "rounds": rounds,
        "python": str(python),
        "commands": {
            s.command.key: {
                "label": s.command.label, "argv": list(s.command.argv),
                "median_s": s.median, "min_s": s.minimum, "peak_rss_mb": s.peak_mb,
                "seconds": [r.seconds for r in s.runs],
            }
            for s in series
        },
        "ratio_import_over_doctor": ratio,
        "target": {"ratio": TARGET_RATIO, "met": ratio > TARGET_RATIO},
    }


def table(series: list[Series], data: dict[str, Any]) -> str:
    width = max(len(s.command.label) for s in series)
    lines = [f"torch {data['variant']}, {data['rounds']} rounds",
             f"{'command':<{width}}  {'median s':>9}  {'min s':>9}  {'peak RSS MB':>11}"]
    lines += [f"{s.command.label:<{width}}  {s.median:>9.3f}  {s.minimum:>9.3f}  "
              f"{s.peak_mb:>11.1f}" for s in series]
    met = "met" if data["target"]["met"] else "NOT met"
    lines += ["", f"doctor is {data['ratio_import_over_doctor']:.1f}x faster than import torch",
              f"target (reported, not enforced): faster than import torch: {met}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--torch", choices=sorted(VARIANTS), default="cpu",
                        help="the environment: torch 2.13.0+cpu or 2.14.1 with CUDA wheels")
    parser.add_argument("--rounds", type=positive, default=DEFAULT_ROUNDS,
                        help=f"measured rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON on stdout (the table goes to stderr)")
    args = parser.parse_args(argv)
    try:
        python = prepare(args.torch)
        cmds = commands(python)
        series = measure(cmds, args.rounds, VARIANTS[args.torch][1])
    except (BenchError, OSError, json.JSONDecodeError) as exc:
        log(f"error: {exc}")
        return 1
    data = figures(series, python, args.torch, args.rounds)
    print(table(series, data), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
