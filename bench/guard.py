#!/usr/bin/env python3
"""Benchmark `module load` of a torch consumer with and without the torchstack halves.

Two module trees of the same shape are written to a temporary directory, as EasyBuild would
write them (Lua, a PythonBundle-style PyTorch module with $EBROOT*, PYTHONPATH and
CMAKE_PREFIX_PATH, `conflict("PyTorch")` and `depends_on` on a trivial Python module):

  A  unguarded  Python/3.11.7, PyTorch/2.13.0, torchvision/0.29.1
  B  guarded    the same, plus halves.provider_lua at the end of PyTorch/2.13.0 and
                halves.consumer_lua before torchvision's depends_on("PyTorch/2.13.0")

The fingerprints are built directly: torch 2.13.0+cpu (torch-2.13.0-cxx11-cpu) and a cxx
consumer built on it. Every command runs the real Lmod in a clean environment (HOME, PATH,
LANG and MODULEPATH only) and is measured two ways, A and B interleaved (the order alternates
each round), after one discarded warm-up round that also checks what each load did:

  whole command  bash -c 'source <lmod init>; module load torchvision/0.29.1'; wall time of
                 the process (time.perf_counter), shell start and Lmod init included
  in one shell   one bash runs 20 x (module load; module purge); each load alone is timed
                 with $EPOCHREALTIME (no shell start, no init); a run counts its median load,
                 the min is the fastest single load

The same is measured under Environment Modules 5 (Debian's modulecmd.tcl) on Tcl trees of the
same shape as EasyBuild writes them for it (`conflict PyTorch`, `module load` of each
dependency, halves.provider_tcl and halves.consumer_tcl), tree B also with torchstack's
siteconfig.tcl hook in MODULES_SITECONFIG, as a site installs it.

The target, guarded / unguarded medians at most 1.05, is reported for both but never
enforced: the exit code is 0 unless a load fails (then 1).

Usage: python3 bench/guard.py [--rounds N] [--tool lmod|envmodules|both] [--json]
(with --json, stdout is the JSON alone and the table goes to stderr)
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import log, positive  # noqa: E402

from torchstack.fingerprint.read import Fingerprint, TorchFacts, abi_tag  # noqa: E402
from torchstack.guards import halves  # noqa: E402
from torchstack.guards.protocol import (  # noqa: E402
    CONSUMERS_VARIABLE,
    MODULE_VARIABLE,
    PROVIDER_VARIABLE,
)
from torchstack.guards.siteconfig import siteconfig_tcl  # noqa: E402

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
MODULES_INIT = Path("/usr/share/modules/init/bash")
DEFAULT_ROUNDS = 21
LOADS_PER_SHELL = 20
TARGET_RATIO = 1.05  # guarded / unguarded, medians; reported, not enforced
TIMEOUT = 300
TAIL_CHARS = 4000

PYTHON_MODULE = "Python/3.11.7"
TORCH_MODULE = "PyTorch/2.13.0"
CONSUMER_MODULE = "torchvision/0.29.1"
EB_VERSION = "4.9.4"

_TORCH = TorchFacts("2.13.0", "cpu", True, None, None)
PROVIDER = Fingerprint("provider", "torch", "2.13.0+cpu", _TORCH, None, None, None,
                       abi_tag("provider", None, _TORCH))
_BUILT_ON = TorchFacts("2.13.0", None, True, None, None)
CONSUMER = Fingerprint("consumer", "torchvision", "0.29.1", _BUILT_ON, "cxx", "==2.13.0", None,
                       abi_tag("consumer", "cxx", _BUILT_ON))


class BenchError(Exception):
    """Lmod is missing, or a load failed or did not do what it should."""


# -- the module trees --------------------------------------------------------------------


def _header(description: str, homepage: str, extensions: str = "") -> str:
    """help() and whatis() as EasyBuild writes them in a Lua module."""
    more = f"\n\nIncluded extensions\n===================\n{extensions}" if extensions else ""
    whatis = [f"Description: {description}", f"Homepage: {homepage}", f"URL: {homepage}"]
    if extensions:
        whatis.append(f"Extensions: {extensions}")
    return (
        f"help([==[\n\nDescription\n===========\n{description}\n\n\n"
        f"More information\n================\n - Homepage: {homepage}{more}\n]==])\n\n"
        + "".join(f"whatis([==[{line}]==])\n" for line in whatis)
    )


def _eb_root(name: str) -> str:
    """EasyBuild's $EBROOT<NAME> suffix: '-' -> MIN, '+' -> PLUS, '.' dropped, upper case."""
    return name.upper().replace("-", "MIN").replace("+", "PLUS").replace(".", "")


def _paths(prefix: Path, name: str, version: str, *, site_packages: bool) -> str:
    """The path and EB* lines of an EasyBuild module for an install at `prefix`."""
    var = _eb_root(name)
    lines = [
        f'local root = "{prefix}"\n\n',
        'prepend_path("CMAKE_PREFIX_PATH", root)\n',
        'prepend_path("LD_LIBRARY_PATH", pathJoin(root, "lib"))\n',
        'prepend_path("LIBRARY_PATH", pathJoin(root, "lib"))\n',
        'prepend_path("PATH", pathJoin(root, "bin"))\n',
        f'setenv("EBROOT{var}", root)\n',
        f'setenv("EBVERSION{var}", "{version}")\n',
        f'setenv("EBDEVEL{var}", pathJoin(root, "easybuild/{name}-{version}-easybuild-devel"))\n',
    ]
    if site_packages:
        lines.append('\nprepend_path("PYTHONPATH", '
                     'pathJoin(root, "lib/python3.11/site-packages"))\n')
    return "".join(lines)


def python_module(software: Path) -> str:
    prefix = software / "Python" / "3.11.7"
    return (
        _header("Python is a programming language that lets you work more quickly.",
                "https://python.org/")
        + "\nconflict(\"Python\")\n\n"
        + _paths(prefix, "Python", "3.11.7", site_packages=False)
        + f"-- Built with EasyBuild version {EB_VERSION}\n"
    )


def torch_module(software: Path, guarded: bool) -> str:
    prefix = software / "PyTorch" / "2.13.0"
    torch_sp = 'pathJoin(root, "lib/python3.11/site-packages/torch")'
    text = (
        _header("Tensors and Dynamic neural networks in Python with strong GPU acceleration.",
                "https://pytorch.org/",
                "filelock-3.16.1, fsspec-2024.10.0, networkx-3.4.2, sympy-1.13.3, "
                "torch-2.13.0+cpu")
        + f'\nconflict("PyTorch")\n\ndepends_on("{PYTHON_MODULE}")\n\n'
        + _paths(prefix, "PyTorch", "2.13.0", site_packages=True)
        + f'prepend_path("CMAKE_PREFIX_PATH", {torch_sp})\n'
        + f'prepend_path("LD_LIBRARY_PATH", pathJoin({torch_sp}, "lib"))\n'
        + f'prepend_path("LIBRARY_PATH", pathJoin({torch_sp}, "lib"))\n'
        + f"-- Built with EasyBuild version {EB_VERSION}\n"
    )
    if guarded:  # as torchstack.guards.modulefile does: the provider half at the end
        text += "\n" + halves.provider_lua(PROVIDER, TORCH_MODULE)
    return text


def consumer_module(software: Path, guarded: bool) -> str:
    prefix = software / "torchvision" / "0.29.1"
    guard = halves.consumer_lua(CONSUMER, CONSUMER_MODULE, TORCH_MODULE) if guarded else ""
    return (
        _header("Datasets, Transforms and Models specific to Computer Vision",
                "https://github.com/pytorch/vision")
        + f'\nconflict("torchvision")\n\ndepends_on("{PYTHON_MODULE}")\n\n'
        + guard  # right before the dependency on PyTorch, as torchstack.guards.modulefile places it
        + f'depends_on("{TORCH_MODULE}")\n\n'
        + _paths(prefix, "torchvision", "0.29.1", site_packages=True)
        + f"-- Built with EasyBuild version {EB_VERSION}\n"
    )


def _tcl_module(prefix: Path, name: str, version: str, deps: tuple[str, ...],
                site_packages: bool) -> str:
    """A Tcl module as EasyBuild writes it for Environment Modules (no guard)."""
    var = _eb_root(name)
    lines = ["#%Module\n", f"module-whatis {{Description: {name} {version}}}\n\n",
             f"set root {prefix}\n\n", f"conflict {name}\n\n"]
    lines += [f"module load {dep}\n" for dep in deps]
    lines += [f"\nprepend-path\t{v}\t\t{p}\n" for v, p in (
        ("CMAKE_PREFIX_PATH", "$root"), ("LD_LIBRARY_PATH", "$root/lib"),
        ("LIBRARY_PATH", "$root/lib"), ("PATH", "$root/bin"))]
    lines += [f'setenv\tEBROOT{var}\t\t"$root"\n', f'setenv\tEBVERSION{var}\t\t"{version}"\n']
    if site_packages:
        lines.append("prepend-path\tPYTHONPATH\t\t$root/lib/python3.11/site-packages\n")
    return "".join(lines) + f"# Built with EasyBuild version {EB_VERSION}\n"


def tcl_texts(software: Path, guarded: bool) -> dict[str, str]:
    """The three Tcl modules; the halves where torchstack.guards.modulefile places them."""
    torch = _tcl_module(software / "PyTorch/2.13.0", "PyTorch", "2.13.0", (PYTHON_MODULE,), True)
    vision = _tcl_module(software / "torchvision/0.29.1", "torchvision", "0.29.1",
                         (PYTHON_MODULE, TORCH_MODULE), True)
    if guarded:
        torch += "\n" + halves.provider_tcl(PROVIDER, TORCH_MODULE)
        load = f"module load {TORCH_MODULE}\n"
        vision = vision.replace(load, halves.consumer_tcl(CONSUMER, CONSUMER_MODULE,
                                                          TORCH_MODULE) + load)
    python = _tcl_module(software / "Python/3.11.7", "Python", "3.11.7", (), False)
    return {PYTHON_MODULE: python, TORCH_MODULE: torch, CONSUMER_MODULE: vision}


def lua_texts(software: Path, guarded: bool) -> dict[str, str]:
    return {PYTHON_MODULE: python_module(software), TORCH_MODULE: torch_module(software, guarded),
            CONSUMER_MODULE: consumer_module(software, guarded)}


@dataclass(frozen=True)
class Tool:
    """A module tool: its init script, how module files are named, and how they read."""

    key: str
    name: str
    init: Path
    suffix: str
    texts: Any  # (software, guarded) -> {module: text}


TOOLS = {"lmod": Tool("lmod", "Lmod", LMOD_INIT, ".lua", lua_texts),
         "envmodules": Tool("envmodules", "Environment Modules", MODULES_INIT, "", tcl_texts)}


@dataclass(frozen=True)
class Tree:
    key: str
    label: str
    modulepath: Path
    guarded: bool
    sizes: dict[str, int]
    tool: Tool = TOOLS["lmod"]
    env: dict[str, str] = field(default_factory=dict)


def write_tree(root: Path, software: Path, key: str, label: str, guarded: bool,
               tool: Tool = TOOLS["lmod"]) -> Tree:
    modulepath = root / tool.key / key / "modules"
    texts = tool.texts(software, guarded)
    for name, text in texts.items():
        path = modulepath / f"{name}{tool.suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    sizes = {name: len(text.encode()) for name, text in texts.items()}
    env = {}
    if guarded and tool.key == "envmodules":  # the siteconfig hook, as a site installs it
        hook = root / tool.key / "siteconfig.tcl"
        hook.write_text(siteconfig_tcl(), encoding="utf-8")
        env["MODULES_SITECONFIG"] = str(hook)
    return Tree(key, label, modulepath, guarded, sizes, tool, env)


def make_software(software: Path) -> None:
    """The install prefixes the modules point at (empty, but there)."""
    for sub in ("Python/3.11.7", "PyTorch/2.13.0", "torchvision/0.29.1"):
        for folder in ("bin", "lib/python3.11/site-packages", "easybuild"):
            (software / sub / folder).mkdir(parents=True, exist_ok=True)
    (software / "PyTorch/2.13.0/lib/python3.11/site-packages/torch/lib").mkdir(parents=True)


# -- running Lmod ------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    seconds: float
    returncode: int
    stdout: str
    stderr: str


def run_bash(script: str, modulepath: Path, home: Path,
             extra: dict[str, str] | None = None) -> Result:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "MODULEPATH": str(modulepath), **(extra or {})}
    argv = ["bash", "--noprofile", "--norc", "-c", script]
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=TIMEOUT)
    seconds = time.perf_counter() - start
    return Result(seconds, proc.returncode, proc.stdout, proc.stderr)


def _failed(what: str, tree: Tree, result: Result) -> BenchError:
    return BenchError(f"{what} failed in tree {tree.key} ({tree.label}), exit "
                      f"{result.returncode}:\n{(result.stdout + result.stderr)[-TAIL_CHARS:]}")


def whole_command(init: Path = LMOD_INIT) -> str:
    return f"source {shlex.quote(str(init))}; module load {CONSUMER_MODULE}"


def in_shell_script(loads: int, init: Path = LMOD_INIT) -> str:
    """`loads` x (load; purge) in one shell: each load's start and end, checked it loaded."""
    return "\n".join([
        f"source {shlex.quote(str(init))}",
        f"for ((i = 0; i < {loads}; i++)); do",
        "  t0=$EPOCHREALTIME",
        f"  module load {CONSUMER_MODULE} || exit 1",
        "  t1=$EPOCHREALTIME",
        f'  [[ ":$LOADEDMODULES:" == *":{CONSUMER_MODULE}:"* ]] || exit 2',
        '  echo "$t0 $t1"',
        "  module purge || exit 3",
        "done",
    ])


def load_seconds(result: Result, loads: int) -> list[float]:
    times = []
    for line in result.stdout.split("\n"):
        if line.strip():
            t0, t1 = line.split()
            times.append(float(t1) - float(t0))
    if len(times) != loads:
        raise BenchError(f"expected {loads} load times, got {len(times)}: {result.stdout!r}")
    return times


CHECK = "\n".join([
    "source @INIT@",
    f"module load {CONSUMER_MODULE} || exit $?",
    'printf "%s\\n" "LOADEDMODULES=$LOADEDMODULES"',
    'printf "%s\\n" "EBROOTTORCHVISION=$EBROOTTORCHVISION"',
    'printf "%s\\n" "EBROOTPYTORCH=$EBROOTPYTORCH"',
    *(f'printf "%s\\n" "{name}=${{{name}-<unset>}}"'
      for name in (PROVIDER_VARIABLE, MODULE_VARIABLE, CONSUMERS_VARIABLE)),
])


def check_load(tree: Tree, home: Path) -> None:
    """One load, then what it left: all three modules, and the guard variables in B only."""
    result = run_bash(CHECK.replace("@INIT@", shlex.quote(str(tree.tool.init))), tree.modulepath,
                      home, tree.env)
    if result.returncode != 0:
        raise _failed(f"module load {CONSUMER_MODULE}", tree, result)
    got = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    expected = {
        "LOADEDMODULES": ":".join([PYTHON_MODULE, TORCH_MODULE, CONSUMER_MODULE]),
        PROVIDER_VARIABLE: PROVIDER.abi_tag if tree.guarded else "<unset>",
        MODULE_VARIABLE: TORCH_MODULE if tree.guarded else "<unset>",
        CONSUMERS_VARIABLE: (halves.registration(CONSUMER, CONSUMER_MODULE, TORCH_MODULE)
                             if tree.guarded else "<unset>"),
    }
    wrong = [f"{k}={got.get(k)!r}, expected {v!r}" for k, v in expected.items()
             if got.get(k) != v]
    wrong += [f"{k} is empty" for k in ("EBROOTTORCHVISION", "EBROOTPYTORCH") if not got.get(k)]
    if wrong:
        raise BenchError(f"tree {tree.key}: the load did not do what it should: "
                         + "; ".join(wrong))


def lmod_version(tree: Tree, home: Path) -> str:
    result = run_bash(f"source {shlex.quote(str(tree.tool.init))}; module --version",
                      tree.modulepath, home)
    found = re.search(r"(?:Version|Release)\s+(\S+)", result.stdout + result.stderr)
    return found.group(1) if found else "unknown"


# -- measuring ---------------------------------------------------------------------------


@dataclass
class Series:
    """Seconds per measured round: a whole command, or a run's median load in one shell."""

    tree: Tree
    values: list[float] = field(default_factory=list)
    all_loads: list[float] = field(default_factory=list)  # in one shell: every load

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def minimum(self) -> float:
        return min(self.all_loads or self.values)


def measure(trees: list[Tree], rounds: int, home: Path) -> tuple[list[Series], list[Series]]:
    """A warm-up round (discarded), then `rounds` rounds, A/B order alternating each round."""
    whole = {t.key: Series(t) for t in trees}
    shell = {t.key: Series(t) for t in trees}
    for number in range(rounds + 1):
        order = trees if number % 2 == 0 else trees[::-1]
        for tree in order:
            result = run_bash(whole_command(tree.tool.init), tree.modulepath, home, tree.env)
            if result.returncode != 0:
                raise _failed(f"module load {CONSUMER_MODULE}", tree, result)
            loop = run_bash(in_shell_script(LOADS_PER_SHELL, tree.tool.init), tree.modulepath,
                            home, tree.env)
            if loop.returncode != 0:
                raise _failed(f"{LOADS_PER_SHELL} x (module load; module purge)", tree, loop)
            loads = load_seconds(loop, LOADS_PER_SHELL)
            if number == 0:
                log(f"warm-up {tree.key} ({tree.label}): whole command {result.seconds * 1e3:.1f}"
                    f" ms, load in one shell {statistics.median(loads) * 1e3:.1f} ms")
                continue
            whole[tree.key].values.append(result.seconds)
            shell[tree.key].values.append(statistics.median(loads))
            shell[tree.key].all_loads.extend(loads)
        if number and (number % 5 == 0 or number == rounds):
            log(f"round {number}/{rounds}")
    return list(whole.values()), list(shell.values())


# -- the report --------------------------------------------------------------------------


def _comparison(series: list[Series]) -> dict[str, Any]:
    by_key = {s.tree.key: s for s in series}
    plain, guarded = by_key["A"], by_key["B"]
    ratio = guarded.median / plain.median
    return {
        "unguarded": {"median_s": plain.median, "min_s": plain.minimum, "seconds": plain.values},
        "guarded": {"median_s": guarded.median, "min_s": guarded.minimum,
                    "seconds": guarded.values},
        "ratio_median": ratio,
        "ratio_min": guarded.minimum / plain.minimum,
        "overhead_median_s": guarded.median - plain.median,
        "target": {"max_ratio": TARGET_RATIO, "value": ratio, "met": ratio <= TARGET_RATIO},
    }


def figures(whole: list[Series], shell: list[Series], trees: list[Tree], rounds: int,
            version: str) -> dict[str, Any]:
    return {
        "rounds": rounds,
        "tool": trees[0].tool.name,
        "lmod": version,
        "lmod_init": str(trees[0].tool.init),
        "load": CONSUMER_MODULE,
        "loads_per_shell": LOADS_PER_SHELL,
        "module_bytes": {t.key: t.sizes for t in trees},
        "whole_command": {"command": f"bash -c {shlex.quote(whole_command(trees[0].tool.init))}",
                          **_comparison(whole)},
        "in_one_shell": _comparison(shell),
    }


def table(data: dict[str, Any]) -> str:
    met = {True: "met", False: "NOT met"}
    sizes = ", ".join(
        f"{name} {data['module_bytes']['A'][name]} -> {data['module_bytes']['B'][name]}"
        for name in (TORCH_MODULE, CONSUMER_MODULE))
    lines = [
        f"{data['tool']} {data['lmod']}, {data['rounds']} rounds, module load {CONSUMER_MODULE} "
        f"(-> {TORCH_MODULE} -> {PYTHON_MODULE})",
        f"module file bytes, unguarded -> guarded: {sizes}",
        "",
    ]
    sections = [("whole_command", "whole command"),
                ("in_one_shell", f"load in one shell ({LOADS_PER_SHELL}/run)")]
    width = max(len(title) for _, title in sections) + len(", A unguarded")
    lines.append(f"{'':<{width}}  {'median ms':>9}  {'min ms':>8}")
    for key, title in sections:
        part = data[key]
        for which, label in (("unguarded", "A unguarded"), ("guarded", "B guarded")):
            row = part[which]
            lines.append(f"{title + ', ' + label:<{width}}  {row['median_s'] * 1e3:>9.2f}  "
                         f"{row['min_s'] * 1e3:>8.2f}")
    lines.append("")
    for key, title in sections:
        part = data[key]
        lines.append(f"guarded/unguarded, {title}: {part['ratio_median']:.3f} "
                     f"(median, {part['overhead_median_s'] * 1e3:+.2f} ms), "
                     f"{part['ratio_min']:.3f} (min)")
    lines += ["", f"target (reported, not enforced): guarded/unguarded medians <= {TARGET_RATIO}"]
    for key, title in sections:
        target = data[key]["target"]
        lines.append(f"  {title}: {target['value']:.3f} {met[target['met']]}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=positive, default=DEFAULT_ROUNDS,
                        help=f"measured rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--tool", choices=[*TOOLS, "both"], default="both",
                        help="the module tool to measure (default both)")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON on stdout too (the table then goes to "
                             "stderr)")
    args = parser.parse_args(argv)
    tools = list(TOOLS.values()) if args.tool == "both" else [TOOLS[args.tool]]
    missing = [f"no {tool.name} init at {tool.init}" for tool in tools if not tool.init.is_file()]
    if missing:
        log("error: " + "; ".join(missing))
        return 1
    results = []
    for tool in tools:
        data = run_tool(tool, args.rounds)
        if data is None:
            return 1
        results.append(data)
        print(table(data) + "\n", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else
                         {d["tool"]: d for d in results}, indent=2))
    return 0


def run_tool(tool: Tool, rounds: int) -> dict[str, Any] | None:
    """Both trees of one module tool, checked then measured; None when a load failed."""
    with tempfile.TemporaryDirectory(prefix="torchstack-bench-guard-") as tmp:
        root = Path(tmp)
        home = root / "home"
        home.mkdir()
        software = root / "software"
        make_software(software)
        trees = [write_tree(root, software, "A", "unguarded", False, tool),
                 write_tree(root, software, "B", "guarded", True, tool)]
        try:
            for tree in trees:
                check_load(tree, home)
                log(f"{tool.name} tree {tree.key} ({tree.label}): {tree.modulepath}, "
                    "load checked")
            version = lmod_version(trees[0], home)
            whole, shell = measure(trees, rounds, home)
        except (BenchError, OSError, subprocess.TimeoutExpired) as exc:
            log(f"error: {exc}")
            return None
    return figures(whole, shell, trees, rounds, version)

if __name__ == "__main__":
    sys.exit(main())
