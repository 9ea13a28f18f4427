#!/usr/bin/env python3
"""Benchmark `eb` installing the torch 2.13.0+cpu wheel: PyTorchWheels against upstream.

Two easyconfigs install the same wheel (this machine's `pip download --no-deps torch==2.13.0`,
cached) on the same Python module (the test suite's stand-in: an Lmod module around a venv)
with the SYSTEM toolchain, each through the real `python -m easybuild.main`:

  ours      easyblock = 'PyTorchWheels' (--include-easyblocks): one `uv pip install
            --compile-bytecode` for all wheels, then the torchstack fingerprint
  upstream  easyblock = 'PythonBundle', shaped like EasyBuild 5.4's
            PyTorch-2.9.1-foss-2025a-whl.eb: the torch wheel in exts_list with its sha256 in
            the dict form, the same modextrapaths (sympy, an extension there, is already in
            the stand-in Python here, as networkx and SciPy-bundle are dependencies there)

Both carry upstream's modextrapaths, so the easyblock is the only difference. The runs are
interleaved (ours, upstream, ours, upstream, ...), each into a fresh EasyBuild tree (install,
source, build and tmp paths) under a temporary directory that is removed at the end; only
the Python venv and the wheel are reused, from ${TORCHSTACK_CACHE:-~/.cache/torchstack},
through the test harness (test/ebenv.py, test/conftest.py). The wall time of each whole
`eb` process is measured (time.perf_counter); where that time goes is read from the
timestamps of each run's EasyBuild log (steps, and the shell commands run inside them) and
from torchstack's own timing lines in it (fingerprint, library resolution).

After each round the floor of each part is measured on the same machine: copying the unpacked
wheel (`cp -a`, unzipped beforehand), byte-compiling the copy with `compileall -j0` (all
cores), `import torch` from it, reading each shared object's dynamic section once, and an
`eb` run of an empty Bundle with the same Python dependency (EasyBuild's fixed cost).

The target, at most 0.5x the upstream median, is reported but never enforced: the exit code
is 0 unless an `eb` run (or the preparation) fails, then 1 with the tail of its output.

Usage: python3 bench/install.py [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))
sys.path.insert(0, str(REPO / "bench"))

from _common import RunStats, log, positive  # noqa: E402
from conftest import cache_dir, cache_lock, download_wheel  # noqa: E402
from ebenv import (  # noqa: E402
    PYTHON_VERSION,
    EasyBuildEnv,
    make_python_root,
    wheel_easyconfig,
)
from wheelbuild import sha256  # noqa: E402

TORCH_VERSION = "2.13.0"
EXT_VERSION = f"{TORCH_VERSION}+cpu"
DEFAULT_ROUNDS = 3
TARGET_RATIO = 0.5  # ours / upstream, medians; reported, not enforced
TAIL_CHARS = 4000

# As in PyTorch-2.9.1-foss-2025a-whl.eb; given to both variants.
MODEXTRAPATHS = """\
_torch_site_packages = 'lib/python%(pyshortver)s/site-packages/torch'
modextrapaths = {
    'CMAKE_PREFIX_PATH': _torch_site_packages,
    'LD_LIBRARY_PATH': f'{_torch_site_packages}/lib',
    'LIBRARY_PATH': f'{_torch_site_packages}/lib',
}
"""

UPSTREAM_EASYCONFIG = """\
easyblock = 'PythonBundle'

name = 'PyTorch'
version = '{version}'
versionsuffix = '-whl'

homepage = 'https://pytorch.org/'
description = \"\"\"PyTorch is an optimized tensor library for deep learning using GPUs and CPUs.
Used for applications such as computer vision, deep learning research and
natural language processing.
This module provides the official wheels of PyTorch from pytorch.org\"\"\"

toolchain = SYSTEM

dependencies = [
    ('Python', '{python}'),
]

exts_list = [
    ('torch', '{ext_version}', {{
        'sources': ['{wheel}'],
        'checksums': [{{
            '{wheel}':
                '{checksum}',
        }}],
    }}),
]

{modextrapaths}
moduleclass = 'ai'
"""

# Rows of the breakdown: (key, label). Top-level rows add up to the eb wall time of a run.
ROWS: tuple[tuple[str, str], ...] = (
    ("outside", "eb start-up, parsing, summary (outside steps)"),
    ("pre", "fetch ... install steps"),
    ("ext", "extensions step"),
    ("ext.install", "  wheel install command (uv / pip)"),
    ("ext.commands", "  other shell commands (probes)"),
    ("ext.eb", "  EasyBuild itself"),
    ("post", "postiter + postproc steps"),
    ("post.fingerprint", "  torchstack: fingerprint"),
    ("sanity", "sanity check step"),
    ("sanity.libraries", "  torchstack: library resolution (in a thread)"),
    ("sanity.libraries.wait", "    of which not beside the commands below"),
    ("sanity.import", "  python -c \"import torch, ...\""),
    ("sanity.cxx", "  torchstack: C++ extension build"),
    ("sanity.pip", "  pip --version + pip check + pip list"),
    ("sanity.commands", "  other commands (lmod, file, probes)"),
    ("sanity.eb", "  EasyBuild itself (fake module, file index)"),
    ("module", "cleanup, module, permissions, package steps"),
    ("total", "total = eb wall time"),
)

# The distance to the floor: (label, row of the run, floor) for each part; None: no floor.
# "fixed" is the wall time less every part below it, set against an eb run that installs
# nothing.
PARTS: tuple[tuple[str, str, str | None], ...] = (
    ("EasyBuild's fixed cost", "fixed", "empty_eb"),
    ("unpack + write + byte-compile", "ext.install", "copy_compile"),
    ("  floor: copy the unpacked tree", "", "copy"),
    ("  floor: compileall -j0, same files", "", "compile"),
    ("import torch (sanity)", "sanity.import", "import"),
    ("library resolution (sanity)", "sanity.libraries", "read_objects"),
    ("fingerprint (postproc)", "post.fingerprint", None),
    ("C++ extension build (sanity)", "sanity.cxx", None),
    ("pip --version/check/list (sanity)", "sanity.pip", None),
)


class BenchError(Exception):
    """Preparation failed, or an eb run did not succeed."""


@dataclass(frozen=True)
class Variant:
    """One way of installing the wheel: the easyblock its easyconfig names."""

    key: str
    label: str
    easyblock: str


VARIANTS = (
    Variant("ours", "ours: PyTorchWheels", "PyTorchWheels"),
    Variant("upstream", "upstream: PythonBundle", "PythonBundle"),
)


@dataclass(frozen=True)
class Run:
    """One finished eb run."""

    seconds: float
    phases: dict[str, float]
    installer: str


@dataclass
class Series(RunStats):
    """The runs of one variant."""

    variant: Variant
    runs: list[Run] = field(default_factory=list)

    def phase_median(self, key: str) -> float | None:
        values = [r.phases[key] for r in self.runs if key in r.phases]
        return statistics.median(values) if values else None

    @property
    def installers(self) -> str:
        return "/".join(sorted({r.installer for r in self.runs}))


# -- preparing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What every run reuses: the cached wheel, its sha256, the cached Python venv."""

    wheel: Path
    checksum: str
    python_root: Path


def prepare() -> Inputs:
    """The cached torch wheel and Python venv, through the test harness and its locks."""
    wheel = download_wheel(f"torch=={TORCH_VERSION}")
    if "+cpu" not in wheel.name:
        raise BenchError(f"pip served {wheel.name}, not the {EXT_VERSION} build")
    with cache_lock("pyroot"):
        python_root = make_python_root(cache_dir())
    from torchstack.paths import easyblocks_path

    easyblocks_path()  # fails early without torchstack's easyblocks; imported before timing
    return Inputs(wheel, sha256(wheel), python_root)


def write_easyconfig(variant: Variant, env: EasyBuildEnv, inputs: Inputs) -> Path:
    path = env.root / f"PyTorch-{TORCH_VERSION}-whl.eb"
    if variant.easyblock == "PyTorchWheels":
        return wheel_easyconfig(
            path, "PyTorch", TORCH_VERSION,
            [("torch", EXT_VERSION, inputs.wheel, inputs.checksum)],
            extra=MODEXTRAPATHS,
        )
    path.write_text(UPSTREAM_EASYCONFIG.format(
        version=TORCH_VERSION, python=PYTHON_VERSION, ext_version=EXT_VERSION,
        wheel=inputs.wheel.name, checksum=inputs.checksum, modextrapaths=MODEXTRAPATHS,
    ))
    return path


def run_eb(
    variant: Variant, env: EasyBuildEnv, easyconfig: Path
) -> subprocess.CompletedProcess[str]:
    """Ours through the harness (with --include-easyblocks); upstream's needs no include."""
    if variant.easyblock == "PyTorchWheels":
        return env.eb(easyconfig)
    command = [sys.executable, "-m", "easybuild.main", str(easyconfig),
               "--allow-use-as-root-and-accept-consequences"]
    return subprocess.run(command, env=env.environ(), capture_output=True, text=True,
                          cwd=env.root, check=False)


EMPTY_EASYCONFIG = """\
easyblock = 'Bundle'

name = 'Empty'
version = '1.0'

homepage = 'https://pytorch.org/'
description = "Nothing: the fixed cost of an eb run (torchstack benchmark)"

toolchain = SYSTEM

dependencies = [('Python', '{python}')]

postinstallcmds = ['touch %(installdir)s/empty']
sanity_check_paths = {{'files': ['empty'], 'dirs': []}}

moduleclass = 'ai'
"""


# -- the floor: the same work without EasyBuild or an installer ------------------------------


def _timed(command: list[str], **kwargs: Any) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    seconds = time.perf_counter() - start
    # compileall exits 1 when a file does not compile (torch ships a few such test inputs);
    # the installers skip those files too.
    if result.returncode not in (0, 1) or (result.returncode and "compileall" not in command):
        raise BenchError(f"{' '.join(command)} failed:\n{tail(result)}")
    return seconds


def measure_floor(inputs: Inputs, root: Path) -> dict[str, float]:
    """Seconds of each floor, measured into `root`, which is removed afterwards."""
    from torchstack import loader

    python = str(inputs.python_root / "bin" / "python")
    unpacked, copy = root / "unpacked", root / "copy"
    try:
        root.mkdir(parents=True)
        with zipfile.ZipFile(inputs.wheel) as archive:
            archive.extractall(unpacked)
        floor = {"copy": _timed(["cp", "-a", str(unpacked), str(copy)])}
        floor["compile"] = _timed([python, "-m", "compileall", "-q", "-j0", str(copy)])
        floor["copy_compile"] = floor["copy"] + floor["compile"]
        floor["import"] = _timed([python, "-c", "import torch"], cwd=root,
                                 env=dict(os.environ, PYTHONPATH=str(copy)))
        start = time.perf_counter()
        for path in loader.iter_shared_objects(copy):
            loader.read_object(path)
        floor["read_objects"] = time.perf_counter() - start
        env = EasyBuildEnv(root / "eb", inputs.python_root).setup()
        easyconfig = env.root / "Empty-1.0.eb"
        easyconfig.write_text(EMPTY_EASYCONFIG.format(python=PYTHON_VERSION))
        start = time.perf_counter()
        result = env.eb(easyconfig)
        floor["empty_eb"] = time.perf_counter() - start
        if result.returncode != 0:
            raise BenchError(f"the empty eb run failed:\n{tail(result)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return floor


# -- reading the eb log --------------------------------------------------------------------

LOG_LINE = re.compile(r"^== (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ [A-Z]+ (.*)$")
LOG_PATH = re.compile(r"Results of the build can be found in the log file\(s\) (\S+)")
STEP_START = re.compile(r"Starting (\w+) step$")
COMMAND_START = re.compile(r"Running (?:shell )?command in ")
COMMAND_END = re.compile(r"(?:Shell command|Command) (?:completed|failed)")
INSTALL_CMD = re.compile(r"(?:\buv pip|-m pip) install\b")
UV_INSTALL_CMD = re.compile(r"\buv pip install\b")
IMPORT_CMD = re.compile(r"-c ([\"'])import [\w., ]+\1\s*$")  # exts_filter, not the probes
CXX_CMD = re.compile(r"torchstack_jit_check\.py\s*$")
# torchstack's own timing lines (torchstack/install/steps.py)
# (the library resolution runs in a thread beside the sanity commands: "waited" is the part of
# it that the eb run waited for, the rest overlaps them)
TORCHSTACK_TIMING = re.compile(r"^torchstack: (fingerprint|library resolution) took ([\d.]+) s"
                               r"(?:, waited for ([\d.]+) s)?$")
TIMING_ROWS = {"fingerprint": "post.fingerprint", "library resolution": "sanity.libraries"}
PIP_CMD = re.compile(r"-m pip (?:check|list|--version)\b")

# Steps in EasyBuild's order fall into these groups by their position.
STEP_GROUPS = (("extensions", "ext"), ("postiter", "post"), ("sanitycheck", "sanity"),
               ("cleanup", "module"))


@dataclass(frozen=True)
class Command:
    start: datetime
    seconds: float
    text: str


@dataclass
class Log:
    """What a run's eb log says: (step, start) in order, commands, torchstack's timings."""

    steps: list[tuple[str, datetime]]
    commands: list[Command]
    last: datetime
    timings: dict[str, float]


def _parse_log(text: str) -> Log:
    """The steps, commands, torchstack timing lines and last timestamp of an eb log."""
    timings: dict[str, float] = {}
    steps: list[tuple[str, datetime]] = []
    commands: list[Command] = []
    pending: tuple[datetime, str] | None = None
    expect_command = False
    last: datetime | None = None
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if match is None:
            if expect_command and line.strip() and pending is not None:
                pending = (pending[0], line.strip())
                expect_command = False
            continue
        expect_command = False
        stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
        message = match.group(2)
        last = stamp
        if (step := STEP_START.match(message)) is not None:
            steps.append((step.group(1), stamp))
        elif (timing := TORCHSTACK_TIMING.match(message)) is not None:
            row = TIMING_ROWS[timing.group(1)]
            timings[row] = timings.get(row, 0.0) + float(timing.group(2))
            waited = timing.group(3) if timing.group(3) is not None else timing.group(2)
            timings[f"{row}.wait"] = timings.get(f"{row}.wait", 0.0) + float(waited)
        elif COMMAND_START.match(message):
            pending, expect_command = (stamp, ""), True
        elif COMMAND_END.match(message) and pending is not None:
            commands.append(Command(pending[0], (stamp - pending[0]).total_seconds(), pending[1]))
            pending = None
    if not steps or last is None:
        raise ValueError("no steps in the log")
    return Log(steps, commands, last, timings)


def breakdown(stdout: str, wall: float) -> tuple[dict[str, float], str]:
    """Seconds per row of ROWS for one run (empty when the log cannot be read), installer."""
    found = LOG_PATH.search(stdout)
    try:
        if found is None:
            raise ValueError("eb printed no log path")
        parsed = _parse_log(Path(found.group(1)).read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        log(f"  (no breakdown: {exc})")
        return {}, "?"
    steps, commands, last = parsed.steps, parsed.commands, parsed.last
    phases = dict.fromkeys(("pre", "ext", "post", "sanity", "module"), 0.0)
    bounds: dict[str, list[tuple[datetime, datetime]]] = {key: [] for key in phases}
    group = "pre"
    for index, (name, start) in enumerate(steps):
        end = steps[index + 1][1] if index + 1 < len(steps) else last
        group = dict(STEP_GROUPS).get(name, group)
        phases[group] += (end - start).total_seconds()
        bounds[group].append((start, end))
    phases["outside"] = wall - (last - steps[0][1]).total_seconds()
    phases["total"] = wall

    def within(group: str) -> list[Command]:
        return [c for c in commands if any(a <= c.start < b for a, b in bounds[group])]

    installs = [c for c in within("ext") if INSTALL_CMD.search(c.text)]
    phases["ext.install"] = sum(c.seconds for c in installs)
    phases["ext.commands"] = sum(c.seconds for c in within("ext")) - phases["ext.install"]
    phases["ext.eb"] = phases["ext"] - phases["ext.install"] - phases["ext.commands"]
    sanity = within("sanity")
    phases["sanity.import"] = sum(c.seconds for c in sanity if IMPORT_CMD.search(c.text))
    phases["sanity.pip"] = sum(c.seconds for c in sanity if PIP_CMD.search(c.text))
    cxx = [c.seconds for c in sanity if CXX_CMD.search(c.text)]
    if cxx:  # only with a toolchain that has a compiler; a row left out prints as "-"
        phases["sanity.cxx"] = sum(cxx)
    phases["sanity.commands"] = (sum(c.seconds for c in sanity) - phases["sanity.import"]
                                 - phases["sanity.pip"] - sum(cxx))
    phases.update(parsed.timings)  # only ours: fingerprint, library resolution (and its wait)
    phases["sanity.eb"] = (phases["sanity"] - sum(c.seconds for c in sanity)
                           - phases.get("sanity.libraries.wait", 0.0))
    phases["fixed"] = wall - sum(phases.get(k, 0.0) for k in (
        "ext.install", "sanity.import", "sanity.cxx", "sanity.pip", "post.fingerprint",
        "sanity.libraries.wait"))
    installer = "?"
    if installs:
        installer = "uv" if UV_INSTALL_CMD.search(installs[0].text) else "pip"
    return phases, installer


# -- measuring -----------------------------------------------------------------------------


def tail(result: subprocess.CompletedProcess[str]) -> str:
    return (f"--- stdout (tail) ---\n{result.stdout[-TAIL_CHARS:]}\n"
            f"--- stderr (tail) ---\n{result.stderr[-TAIL_CHARS:]}")


def run_once(variant: Variant, root: Path, inputs: Inputs) -> Run:
    """One eb run into a fresh tree `root`, which is removed afterwards."""
    env = EasyBuildEnv(root, inputs.python_root).setup()
    env.stage_source("PyTorch", inputs.wheel)
    easyconfig = write_easyconfig(variant, env, inputs)
    try:
        start = time.perf_counter()
        result = run_eb(variant, env, easyconfig)
        seconds = time.perf_counter() - start
        if result.returncode != 0:
            raise BenchError(f"eb failed for {variant.label} (exit {result.returncode}), "
                             f"{easyconfig}:\n{tail(result)}")
        phases, installer = breakdown(result.stdout, seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return Run(seconds, phases, installer)


def measure(
    inputs: Inputs, rounds: int, workdir: Path
) -> tuple[list[Series], list[dict[str, float]]]:
    """Each round: one run of each variant, then the floor; all interleaved."""
    series = [Series(v) for v in VARIANTS]
    floors: list[dict[str, float]] = []
    for number in range(1, rounds + 1):
        for entry in series:
            root = workdir / f"{entry.variant.key}-{number}"
            run = run_once(entry.variant, root, inputs)
            entry.runs.append(run)
            log(f"round {number}/{rounds} {entry.variant.label}: {run.seconds:.1f} s "
                f"(installer: {run.installer})")
        floors.append(measure_floor(inputs, workdir / f"floor-{number}"))
        log(f"round {number}/{rounds} floor: " + ", ".join(
            f"{key} {value:.1f} s" for key, value in floors[-1].items()))
    return series, floors


def floor_median(floors: list[dict[str, float]], key: str | None) -> float | None:
    values = [f[key] for f in floors if key is not None and key in f]
    return statistics.median(values) if values else None


# -- the report ----------------------------------------------------------------------------


def figures(series: list[Series], floors: list[dict[str, float]], inputs: Inputs, rounds: int,
            load: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Any]:
    by_key = {s.variant.key: s for s in series}
    ours, upstream = by_key["ours"], by_key["upstream"]
    ratio = ours.median / upstream.median
    return {
        "rounds": rounds,
        "wheel": inputs.wheel.name,
        "python": sys.executable,
        "cpus": os.cpu_count(),
        "loadavg_start": list(load[0]),
        "loadavg_end": list(load[1]),
        "variants": {
            s.variant.key: {
                "label": s.variant.label,
                "easyblock": s.variant.easyblock,
                "installer": s.installers,
                "median_s": s.median,
                "min_s": s.minimum,
                "seconds": [r.seconds for r in s.runs],
                "phases_median_s": {k: s.phase_median(k) for k, _ in ROWS},
                "phases_s": [r.phases for r in s.runs],
            }
            for s in series
        },
        "ratio": {"median": ratio, "min": ours.minimum / upstream.minimum},
        "floor": {
            "median_s": {key: floor_median(floors, key) for key in floors[0]} if floors else {},
            "rounds": floors,
        },
        "target": {"max_ratio": TARGET_RATIO, "value": ratio, "met": ratio <= TARGET_RATIO},
    }


def _cell(value: float | None) -> str:
    return f"{value:>9.1f}" if value is not None else f"{'n/a':>9}"


def table(series: list[Series], data: dict[str, Any]) -> str:
    width = max(len(s.variant.label) for s in series)
    lines = [
        f"eb wall time, {data['wheel']}, SYSTEM toolchain, {data['rounds']} round(s) "
        f"interleaved, fresh install path per run",
        "",
        f"{'variant':<{width}}  {'installer':>9}  {'median s':>9}  {'min s':>9}  runs s",
    ]
    for s in series:
        runs = " ".join(f"{r.seconds:.1f}" for r in s.runs)
        lines.append(f"{s.variant.label:<{width}}  {s.installers:>9}  {s.median:>9.1f}  "
                     f"{s.minimum:>9.1f}  {runs}")
    ratio, target = data["ratio"], data["target"]
    upstream = next(s for s in series if s.variant.key == "upstream").median
    floor = whole_floor(data["floor"]["median_s"])
    met = "met" if target["met"] else "NOT met"
    lines += [
        "",
        f"ours/upstream: {ratio['median']:.2f}x (medians), {ratio['min']:.2f}x (minima)",
        f"target <= {TARGET_RATIO:.2f}x upstream (reported, not enforced): {met}",
        f"the target is {TARGET_RATIO * upstream:.1f} s; the floor of a whole install (below) "
        f"is {floor:.1f} s = {floor / upstream:.2f}x upstream",
        "",
        "where the time goes, median s per row over the rounds (from the eb logs' timestamps;",
        "medians of rows need not add up exactly):",
    ]
    label_width = max(len(label) for _, label in ROWS)
    lines.append(f"{'':<{label_width}}  " + "  ".join(f"{s.variant.key:>9}" for s in series))
    for key, label in ROWS:
        lines.append(f"{label:<{label_width}}  "
                     + "  ".join(_cell(s.phase_median(key)) for s in series))
    lines += ["", *floor_table(series, data["floor"]["median_s"])]
    start, end = data["loadavg_start"], data["loadavg_end"]
    lines += [
        "",
        f"{data['cpus']} CPUs; load average {start[0]:.2f} at start, {end[0]:.2f} at end "
        "(other jobs on the machine make these figures noisy)",
    ]
    return "\n".join(lines)


def whole_floor(floor: dict[str, float | None]) -> float:
    """The least an install with its import check can take: an empty eb run, the copy, the
    byte-compile and one import."""
    return sum(v for k in ("empty_eb", "copy_compile", "import")
               if (v := floor.get(k)) is not None)


def floor_table(series: list[Series], floor: dict[str, float | None]) -> list[str]:
    """Each part of a run next to its floor on this machine, medians; '-' where none."""
    def cell(value: float | None) -> str:
        return f"{value:>9.1f}" if value is not None else f"{'-':>9}"

    label_width = max(len(label) for label, _, _ in PARTS)
    keys = [s.variant.key for s in series]
    lines = [
        "distance to the floor, median s (floor: the same work measured without EasyBuild or an",
        "installer in the same bench run; '-': no floor, or not run by that easyblock):",
        f"{'':<{label_width}}  {'floor':>9}  " + "  ".join(
            f"{k:>9}  {'-floor':>9}" for k in keys),
    ]
    for label, row, floor_key in PARTS:
        bottom = floor.get(floor_key) if floor_key else None
        cells = []
        for entry in series:
            value = entry.phase_median(row) if row else None
            over = value - bottom if value is not None and bottom is not None else None
            cells.append(f"{cell(value)}  {cell(over)}")
        lines.append(f"{label:<{label_width}}  {cell(bottom)}  " + "  ".join(cells))
    total = whole_floor(floor)
    lines.append(f"{'floor of a whole install':<{label_width}}  {cell(total)}  " + "  ".join(
        f"{cell(s.median)}  {cell(s.median - total)}" for s in series))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=positive, default=DEFAULT_ROUNDS,
                        help=f"rounds, each one run of each variant (default {DEFAULT_ROUNDS})")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON on stdout too (the table then goes "
                             "to stderr)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="torchstack-bench-install-"))
    try:
        inputs = prepare()
        log(f"wheel: {inputs.wheel}\npython: {inputs.python_root}\nwork dir: {workdir}")
        load_start = os.getloadavg()
        series, floors = measure(inputs, args.rounds, workdir)
        load_end = os.getloadavg()
    except (BenchError, OSError, subprocess.CalledProcessError) as exc:
        log(f"error: {exc}")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    data = figures(series, floors, inputs, args.rounds, (load_start, load_end))
    # With --json, stdout is the JSON alone (for `> figures.json`), the table goes to stderr.
    print(table(series, data), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
