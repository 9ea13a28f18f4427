#!/usr/bin/env python3
"""Benchmark `torchstack fingerprint` against `import torch` and `nm -D | grep`, side by side.

Prepares once, cached under ${TORCHSTACK_CACHE:-~/.cache/torchstack}/bench/, an installed
torch 2.13.0+cpu tree (`pip download` then `pip install --no-deps --target`), then runs three
whole commands as subprocesses, interleaved in rounds after one discarded warm-up round:

  fingerprint   torchstack fingerprint SITE_PACKAGES --json
  import torch  python -c "import torch; print(torch._C._GLIBCXX_USE_CXX11_ABI, ...)"
  nm | grep     sh -c "nm -D --defined-only .../libtorch_cpu.so | grep -c __cxx11"

Each run's wall time (time.perf_counter) and its own peak RSS (os.wait4 on the child's pid)
are recorded. The targets are printed with whether they are met, but never enforced: the
exit code is 0 unless a command fails or the fingerprint is wrong (then 1).

With --user-venv, torchstack's wheel is built from this checkout and installed into a fresh
venv without system site-packages, as a user installs it, and both Python commands run with
that venv's interpreter: no editable-install finder and none of the machine's own .pth hooks
in either.

Usage: python3 bench/fingerprint.py [--rounds N] [--json] [--user-venv]
(with --json, stdout is the JSON alone and the table goes to stderr)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Run, RunStats, log, positive, timed_run

REPO = Path(__file__).resolve().parents[1]
TORCH_VERSION = "2.13.0"
TREE_NAME = f"torch-{TORCH_VERSION}-cpu"
EXPECTED_ABI_TAG = f"torch-{TORCH_VERSION}-cxx11-cpu"
DEFAULT_ROUNDS = 7

# Modules `import torch` needs at run time, with the requirement that installs each one
# (from torch's Requires-Dist). numpy is optional for torch and is not installed.
RUNTIME_DEPS = {
    "typing_extensions": "typing-extensions>=4.10.0",
    "sympy": "sympy>=1.13.3",
    "filelock": "filelock",
    "fsspec": "fsspec>=0.8.5",
    "networkx": "networkx>=2.5.1",
    "jinja2": "jinja2",
}

# Targets, reported but not enforced.
TARGET_IMPORT_RATIO = 20.0
TARGET_NM_RATIO = 1.0
TARGET_PEAK_MB = 100.0


@dataclass(frozen=True)
class Tree:
    """The prepared torch install: its site-packages and the folder of missing runtime deps."""

    site_packages: Path
    deps: Path | None

    @property
    def libtorch_cpu(self) -> Path:
        return self.site_packages / "torch" / "lib" / "libtorch_cpu.so"


@dataclass(frozen=True)
class Command:
    """One whole command to time, with the environment it runs in."""

    key: str
    label: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(repr=False)


@dataclass
class Series(RunStats):
    """The measured (not warm-up) runs of one command."""

    command: Command
    runs: list[Run] = field(default_factory=list)


class BenchError(Exception):
    """Preparation failed, or a command did not run as it should."""


class WrongFingerprint(BenchError):
    """`torchstack fingerprint` ran but printed the wrong fingerprint."""


# -- preparing the torch tree ------------------------------------------------------------


def cache_root() -> Path:
    base = os.environ.get("TORCHSTACK_CACHE") or "~/.cache/torchstack"
    return Path(base).expanduser() / "bench"


def _pip(args: Sequence[str]) -> None:
    argv = [sys.executable, "-m", "pip", *args]
    log(f"$ {' '.join(argv)}")
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise BenchError(f"pip failed ({result.returncode}):\n{result.stdout[-4000:]}")


def _find_wheel(folder: Path) -> Path | None:
    wheels = sorted(folder.glob(f"torch-{TORCH_VERSION}*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def _interpreter_tag() -> str:
    """cpython-311-x86_64-linux-gnu: the wheels and the tree are only good for this one."""
    return str(sysconfig.get_config_var("SOABI") or sys.implementation.cache_tag)


def download_wheel(root: Path) -> Path:
    folder = root / "wheels" / _interpreter_tag()
    wheel = _find_wheel(folder)
    if wheel is None:
        folder.mkdir(parents=True, exist_ok=True)
        requirement = f"torch=={TORCH_VERSION}"
        _pip(["download", "--no-deps", "--only-binary=:all:", "--dest", str(folder), requirement])
        wheel = _find_wheel(folder)
        if wheel is None:
            raise BenchError(f"pip download left no torch-{TORCH_VERSION}*.whl in {folder}")
    if "+cpu" not in wheel.name:
        raise BenchError(f"pip served {wheel.name}, not the {TORCH_VERSION}+cpu build")
    return wheel


def install_tree(root: Path) -> Path:
    """site-packages of torch installed with --target; a marker says for which interpreter."""
    tree = root / TREE_NAME
    site_packages = tree / "site-packages"
    marker = tree / "installed"
    stamp = f"{_interpreter_tag()}\n"
    complete = (site_packages / "torch" / "version.py").is_file()
    if complete and marker.is_file() and marker.read_text(encoding="utf-8") == stamp:
        return site_packages
    wheel = download_wheel(root)
    marker.unlink(missing_ok=True)
    if site_packages.exists():
        shutil.rmtree(site_packages)  # interrupted, or for another interpreter
    # pip compiles .pyc files, as an ordinary install has them.
    _pip(["install", "--no-deps", "--target", str(site_packages), str(wheel)])
    marker.write_text(stamp, encoding="utf-8")
    return site_packages


def install_runtime_deps(root: Path) -> Path | None:
    """A folder with the runtime deps this interpreter lacks; None when it lacks none."""
    folder = root / TREE_NAME / "deps"
    missing = [m for m in RUNTIME_DEPS if importlib.util.find_spec(m) is None]
    if folder.is_dir():
        missing = [m for m in missing if not _provided_by(folder, m)]
    if missing:
        log(f"runtime deps missing from this interpreter: {', '.join(missing)}")
        _pip(["install", "--target", str(folder), "--upgrade", *(RUNTIME_DEPS[m] for m in missing)])
    return folder if folder.is_dir() else None


def _provided_by(folder: Path, module: str) -> bool:
    return (folder / module).is_dir() or (folder / f"{module}.py").is_file()


def prepare() -> Tree:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    site_packages = install_tree(root)
    return Tree(site_packages, install_runtime_deps(root))


# -- the commands ------------------------------------------------------------------------


def torchstack_argv() -> tuple[str, ...] | None:
    """The console script beside this interpreter, else on PATH (not a pyenv shim)."""
    beside = shutil.which("torchstack", path=str(Path(sys.executable).parent))
    found = beside or shutil.which("torchstack")
    if found and f"{os.sep}shims{os.sep}" not in found:
        return (found,)
    return None


def _with_path(env: dict[str, str], *folders: str) -> dict[str, str]:
    """`env` with `folders` put first on PYTHONPATH."""
    old = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    return env | {"PYTHONPATH": os.pathsep.join([*folders, *old])}


def user_venv() -> Path:
    """A fresh venv (no system site-packages) holding torchstack's wheel built from this
    checkout, with its dependencies, as a user installs it."""
    work = cache_root() / "user-venv"
    shutil.rmtree(work, ignore_errors=True)
    quiet = ("--quiet", "--disable-pip-version-check")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", *quiet, "--no-deps",
                        "--wheel-dir", str(work / "dist"), str(REPO)], check=True)
        wheel = next((work / "dist").glob("torchstack-*.whl"))
        # torch's own runtime requirements too: its import runs in this venv as well
        subprocess.run([str(work / "venv" / "bin" / "python"), "-m", "pip", "install", *quiet,
                        str(wheel), *RUNTIME_DEPS.values()], check=True)
    except (subprocess.CalledProcessError, StopIteration) as exc:
        raise BenchError(f"cannot install torchstack's wheel into a venv: {exc}") from exc
    return work / "venv"


def commands(tree: Tree, venv: Path | None = None) -> list[Command]:
    """The three commands; with `venv`, both Python ones run with its interpreter."""
    if shutil.which("nm") is None:
        raise BenchError("nm is not on PATH (it comes with binutils)")
    env = dict(os.environ)
    # Steady state, as on an ordinary machine: the warm-up round leaves bytecode caches
    # (for an editable torchstack too), so that no measured run compiles source.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    python = str(venv / "bin" / "python") if venv else sys.executable
    script = (str(venv / "bin" / "torchstack"),) if venv else torchstack_argv()
    fingerprint_env = env if script else _with_path(env, str(REPO))
    fingerprint = script or (python, "-m", "torchstack")
    # the deps folder holds what this interpreter lacks; a venv has its own
    deps = [str(tree.deps)] if tree.deps and not venv else []
    torch_path = [str(tree.site_packages), *deps]
    torch_env = _with_path(env, *torch_path)
    probe = "import torch; print(torch._C._GLIBCXX_USE_CXX11_ABI, torch.version.cuda)"
    nm = f"nm -D --defined-only {tree.libtorch_cpu} | grep -c __cxx11"
    return [
        Command(
            "fingerprint",
            "torchstack fingerprint",
            (*fingerprint, "fingerprint", str(tree.site_packages), "--json"),
            fingerprint_env,
        ),
        Command("import_torch", "import torch", (python, "-c", probe), torch_env),
        Command("nm", "nm -D | grep -c", ("sh", "-c", nm), env),
    ]


def run_once(command: Command) -> Run:
    return timed_run(command.argv, command.env)


def checked(command: Command, run: Run) -> Run:
    if run.returncode != 0:
        raise BenchError(
            f"{command.label} exited {run.returncode}: {' '.join(command.argv)}\n"
            f"{run.stderr[-4000:]}"
        )
    return run


def fingerprint_problem(run: Run) -> str | None:
    """Why the fingerprint output is wrong, None when it is right."""
    try:
        data = json.loads(run.stdout)
    except json.JSONDecodeError as exc:
        return f"output is not JSON ({exc}): {run.stdout[:500]!r}"
    tag = data.get("abi_tag") if isinstance(data, dict) else None
    if tag != EXPECTED_ABI_TAG:
        return f"abi_tag is {tag!r}, expected {EXPECTED_ABI_TAG!r}"
    return None


def measure(cmds: list[Command], rounds: int) -> list[Series]:
    """A warm-up round (discarded), then `rounds` rounds, the order rotated each round.

    Every fingerprint run's output is checked; a wrong one stops the benchmark.
    """
    series = [Series(c) for c in cmds]
    for number in range(rounds + 1):
        shift = number % len(series)
        for entry in series[shift:] + series[:shift]:
            command = entry.command
            run = checked(command, run_once(command))
            if command.key == "fingerprint":
                problem = fingerprint_problem(run)
                if problem is not None:
                    raise WrongFingerprint(f"torchstack fingerprint is wrong: {problem}")
            if number == 0:
                shown = "" if command.key == "fingerprint" else f", printed {run.stdout.strip()!r}"
                log(f"warm-up {command.label}: {run.seconds:.3f} s{shown}")
            else:
                entry.runs.append(run)
    return series


# -- the report --------------------------------------------------------------------------


def figures(series: list[Series], tree: Tree, rounds: int,
            python: str = sys.executable) -> dict[str, Any]:
    by_key = {s.command.key: s for s in series}
    fingerprint = by_key["fingerprint"]
    import_ratio = by_key["import_torch"].median / fingerprint.median
    nm_ratio = by_key["nm"].median / fingerprint.median
    return {
        "rounds": rounds,
        "site_packages": str(tree.site_packages),
        "python": python,
        "commands": {
            s.command.key: {
                "label": s.command.label,
                "argv": list(s.command.argv),
                "median_s": s.median,
                "min_s": s.minimum,
                "peak_rss_mb": s.peak_mb,
                "seconds": [r.seconds for r in s.runs],
                "max_rss_kb": [r.max_rss_kb for r in s.runs],
            }
            for s in series
        },
        "ratios": {"import_torch_over_fingerprint": import_ratio, "nm_over_fingerprint": nm_ratio},
        "targets": {
            "import_torch_ratio": {
                "target": TARGET_IMPORT_RATIO,
                "value": import_ratio,
                "met": import_ratio >= TARGET_IMPORT_RATIO,
            },
            "nm_ratio": {"target": TARGET_NM_RATIO, "value": nm_ratio, "met": nm_ratio > 1.0},
            "fingerprint_peak_rss_mb": {
                "target": TARGET_PEAK_MB,
                "value": fingerprint.peak_mb,
                "met": fingerprint.peak_mb < TARGET_PEAK_MB,
            },
        },
    }


def table(series: list[Series], data: dict[str, Any]) -> str:
    width = max(len(s.command.label) for s in series)
    lines = [f"{'command':<{width}}  {'median s':>9}  {'min s':>9}  {'peak RSS MB':>11}"]
    for s in series:
        lines.append(
            f"{s.command.label:<{width}}  {s.median:>9.3f}  {s.minimum:>9.3f}  {s.peak_mb:>11.1f}"
        )
    ratios, targets = data["ratios"], data["targets"]
    met = {True: "met", False: "NOT met"}
    lines += [
        "",
        f"fingerprint is {ratios['import_torch_over_fingerprint']:.1f}x faster than import torch",
        f"fingerprint is {ratios['nm_over_fingerprint']:.1f}x faster than nm -D | grep",
        "",
        "targets (reported, not enforced):",
        f"  >= {TARGET_IMPORT_RATIO:.0f}x faster than import torch: "
        f"{met[targets['import_torch_ratio']['met']]}",
        f"  faster than nm -D | grep:          {met[targets['nm_ratio']['met']]}",
        f"  peak RSS < {TARGET_PEAK_MB:.0f} MB:                "
        f"{met[targets['fingerprint_peak_rss_mb']['met']]}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--rounds", type=positive, default=DEFAULT_ROUNDS, help="measured rounds (default 7)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the figures as JSON on stdout too (the table then goes to stderr)",
    )
    parser.add_argument(
        "--user-venv",
        action="store_true",
        help="time torchstack installed from its wheel into a fresh venv, as a user has it",
    )
    args = parser.parse_args(argv)
    try:
        tree = prepare()
        venv = user_venv() if args.user_venv else None
        cmds = commands(tree, venv)
        log(f"torch tree: {tree.site_packages}")
        for command in cmds:
            log(f"  {command.key}: {' '.join(command.argv)}")
        series = measure(cmds, args.rounds)
    except (BenchError, OSError) as exc:
        log(f"error: {exc}")
        return 1
    data = figures(series, tree, args.rounds, cmds[1].argv[0])
    # With --json, stdout is the JSON alone (for `> figures.json`), the table goes to stderr.
    print(table(series, data), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
