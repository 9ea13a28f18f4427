#!/usr/bin/env python3
"""Benchmark `eb` installing torch from wheels: PyTorchWheels against upstream's PythonBundle.

Two stacks, each installed by easyconfigs of both easyblocks on the same Python module (the
test suite's stand-in: an Lmod module around a venv), through the real `python -m easybuild.main`:

  --stack cpu     the torch 2.13.0+cpu wheel (this machine's `pip download --no-deps
                  torch==2.13.0`, cached)
      ours        easyblock = 'PyTorchWheels' (--include-easyblocks): one `uv pip install`
                  of all wheels, byte-compiled and import-checked in threads beside
                  EasyBuild's steps, the torchstack fingerprint and checks
      upstream    easyblock = 'PythonBundle', shaped like EasyBuild 5.4's
                  PyTorch-2.9.1-foss-2025a-whl.eb: the wheel in exts_list with its sha256 in
                  the dict form, the same modextrapaths
  --stack cuda13  torch 2.14.1 with every wheel it pins (`pip download torch==2.14.1`: the
                  nvidia wheels, triton, cuda-bindings; about 3 GB, cached)
      ours              PyTorchWheels, cuda_libs = 'wheels': every wheel (about 5 GB installed)
      upstream          PythonBundle with the same wheels in exts_list
      ours-modules      PyTorchWheels, cuda_libs = 'modules': torch, triton, cuda-bindings and
                        cuda-pathfinder on stand-in CUDA, cuDNN, NCCL, cuSPARSELt and NVSHMEM
                        modules holding the nvidia wheels' real libraries
                        (test/support/cudastack.py)
      upstream-modules  upstream's own way, as PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb:
                        PythonBundle with the same four wheels on the same modules and a
                        CUDA-wheel-bundle module of dummy packages (dummy_package = True) for
                        torch's pins, installed before the timed run

All carry upstream's modextrapaths, so the easyblock is the only difference. The runs are
interleaved (ours, upstream, ..., round after round), each into a fresh EasyBuild tree (install,
source, build and tmp paths) under a temporary directory that is removed at the end; only the
Python venv, the wheels and the stand-in modules' libraries are reused, from
${TORCHSTACK_CACHE:-~/.cache/torchstack}, through the test harness (test/support/ebenv.py,
test/support/wheelcache.py, test/support/cudastack.py). The wall time of each whole `eb` process is
measured (time.perf_counter), its peak RSS: that of the largest process of the eb process tree
(wait4), not the sum of processes running at once, and its processor time: user + system time of
the whole process tree (wait4). Work of P processor seconds cannot take less than P / cores
seconds, however well it overlaps; the report sets that bound against upstream.
Where the time goes is read from the timestamps of each run's EasyBuild log (steps, and the
shell commands run inside them) and from torchstack's own timing lines in it (fingerprint,
library resolution, byte-compile, import check, C++ extension build). While each run lasts,
a thread samples the busy processor time of the whole machine (/proc/stat) every 50 ms, so the
report also says how many cores were busy in each part of the run and how many core seconds
were left idle there: the only room that more overlap could use.

With --toolchain gcccore the easyconfigs use a GCCcore toolchain of the system's gcc (a site
module, test/support/ebenv.py), so PyTorchWheels builds its C++ extension at sanity check; with the
default SYSTEM toolchain it has no compiler and skips that check.

After each round the floor of each part is measured on the same machine, for each set of wheels:
copying the unpacked wheels (`cp -a`, unzipped beforehand), byte-compiling the copy with
`compileall -j0` and with torchstack's bytecode.py (all cores; the faster counts), `import
torch` from it, reading each shared object's dynamic section once, building the C++ extension
against it (with --toolchain gcccore), and an `eb` run of an empty Bundle with the same Python
dependency (EasyBuild's fixed cost); each with its processor time.

The target, at most 0.5x the upstream median for the CPU wheel, is reported but never enforced:
the exit code is 0 unless an `eb` run (or the preparation) fails, then 1 with the tail of its
output. For the CUDA stack the ratios are reported without a target.

Usage: python3 bench/install.py [--stack cpu|cuda13] [--toolchain system|gcccore]
                                [--rounds N] [--json]
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
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))
sys.path.insert(0, str(REPO / "bench"))

from _common import (  # noqa: E402
    SAMPLE_SECONDS,
    CoreUse,
    RunStats,
    log,
    positive,
    sampled,
    timed_run,
)
from support.cudastack import (  # noqa: E402
    IN_PYTHON_MODULE,
    download_stack,
    make_module_roots,
    module_versions,
    write_module,
)
from support.ebenv import (  # noqa: E402
    GCC_VERSION,
    PYTHON_VERSION,
    EasyBuildEnv,
    make_python_root,
    wheel_easyconfig,
    write_gcccore_toolchain,
)
from support.wheelbuild import sha256  # noqa: E402
from support.wheelcache import cache_dir, cache_lock, download_wheel  # noqa: E402

DEFAULT_ROUNDS = 3
SAMPLE_MS = round(SAMPLE_SECONDS * 1000)
TARGET_RATIO = 0.5  # ours / upstream for the CPU wheel, medians; reported, not enforced
TAIL_CHARS = 4000
# EasyBuild's SYSTEM, as the toolchain of a dependency
SYSTEM_DEP = {"name": "system", "version": "system"}

# As in PyTorch-2.9.1-foss-2025a-whl.eb; given to every variant.
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

name = '{name}'
version = '{version}'
versionsuffix = '{versionsuffix}'

homepage = 'https://pytorch.org/'
description = \"\"\"{description}\"\"\"

toolchain = {toolchain}

dependencies = {dependencies}

{body}
moduleclass = 'ai'
"""

UPSTREAM_DESCRIPTION = """\
PyTorch is an optimized tensor library for deep learning using GPUs and CPUs.
Used for applications such as computer vision, deep learning research and
natural language processing.
This module provides the official wheels of PyTorch from pytorch.org"""

# Rows of the breakdown: (key, label). Top-level rows add up to the eb wall time of a run.
ROWS: tuple[tuple[str, str], ...] = (
    ("outside", "eb start-up, parsing, summary (outside steps)"),
    ("pre", "fetch ... install steps"),
    ("ext", "extensions step"),
    ("ext.install", "  wheel install command (uv / pip)"),
    ("compile", "  torchstack: byte-compile after uv (in a thread)"),
    ("compile.wait", "    of which not beside the steps below"),
    ("ext.commands", "  other shell commands (probes)"),
    ("ext.eb", "  EasyBuild itself"),
    ("post", "postiter + postproc steps"),
    ("post.fingerprint", "  torchstack: fingerprint"),
    ("sanity", "sanity check step"),
    ("sanity.libraries", "  torchstack: library resolution (in a thread)"),
    ("sanity.libraries.wait", "    of which not beside the commands below"),
    ("sanity.import", "  python -c \"import torch, ...\" (ours: in a thread)"),
    ("sanity.import.wait", "    of which not beside the commands below"),
    ("sanity.cxx", "  torchstack: C++ extension build (in a thread)"),
    ("sanity.cxx.wait", "    of which not beside the commands"),
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
    ("unpack + write + byte-compile", "install_compile", "copy_compile"),
    ("  floor: copy the unpacked tree", "", "copy"),
    ("  floor: byte-compile, the faster of:", "", "compile"),
    ("    compileall -j0, same files", "", "compileall"),
    ("    torchstack's bytecode.py, same files", "", "bytecode"),
    ("import torch (sanity)", "sanity.import", "import"),
    ("library resolution (sanity)", "sanity.libraries", "read_objects"),
    ("fingerprint (postproc)", "post.fingerprint", None),
    ("C++ extension build (sanity)", "sanity.cxx", "cxx"),
    ("pip --version/check/list (sanity)", "sanity.pip", None),
)

# Where a run leaves cores idle: (key, label, first step, step that ends it); None: the start or
# the end of the eb process.
CORE_PARTS: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("start", "start-up ... install steps (probes, checksum)", None, "extensions"),
    ("unpack", "extensions step (the wheel install)", "extensions", "postiter"),
    ("checks", "postiter ... sanity check steps", "postiter", "cleanup"),
    ("end", "cleanup ... package steps, exit", "cleanup", None),
)


class BenchError(Exception):
    """Preparation failed, or an eb run did not succeed."""


@dataclass(frozen=True)
class Variant:
    """One way of installing a stack: the easyblock, the set of wheels, where CUDA comes from.

    `anchor` is the key of the upstream variant this one is set against (None: it is one)."""

    key: str
    label: str
    easyblock: str
    wheel_set: str  # "all": every wheel of the stack; "python": the CUDA libraries from modules
    cuda_libs: str | None = None  # PyTorchWheels' cuda_libs; None: its default
    anchor: str | None = None


@dataclass(frozen=True)
class Stack:
    """What is installed: torch's version, the module's versionsuffix, the variants."""

    key: str
    version: str
    versionsuffix: str
    variants: tuple[Variant, ...]
    target: float | None  # ours / upstream, reported; None: measured without a target


STACKS = {
    "cpu": Stack("cpu", "2.13.0", "-whl", (
        Variant("ours", "ours: PyTorchWheels", "PyTorchWheels", "all", anchor="upstream"),
        Variant("upstream", "upstream: PythonBundle", "PythonBundle", "all"),
    ), TARGET_RATIO),
    "cuda13": Stack("cuda13", "2.14.1", "-CUDA-13.0-whl", (
        Variant("ours", "ours: PyTorchWheels, nvidia wheels", "PyTorchWheels", "all",
                "wheels", anchor="upstream"),
        Variant("upstream", "upstream: PythonBundle, nvidia wheels", "PythonBundle", "all"),
        Variant("ours-modules", "ours: PyTorchWheels, CUDA modules", "PyTorchWheels", "python",
                "modules", anchor="upstream-modules"),
        Variant("upstream-modules", "upstream: PythonBundle, CUDA modules + dummy bundle",
                "PythonBundle", "python"),
    ), None),
}
# The wheels of the CUDA stack that the "python" set keeps (as test/install/test_easyblock_cuda.py)
PYTHON_WHEELS = ("torch", "triton", "cuda-bindings", "cuda-pathfinder")
WHEEL_SETS = {"all": "every wheel of the stack", "python": "without the CUDA library wheels"}


@dataclass(frozen=True)
class Run:
    """One finished eb run; `cpu_seconds`: user + system time of its whole process tree."""

    seconds: float
    max_rss_kb: int
    phases: dict[str, float]
    installer: str
    cpu_seconds: float


@dataclass
class Series(RunStats):
    """The runs of one variant."""

    variant: Variant
    runs: list[Run] = field(default_factory=list)

    @property
    def cpu_median(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.runs)

    def phase_median(self, key: str) -> float | None:
        values = [r.phases[key] for r in self.runs if key in r.phases]
        return statistics.median(values) if values else None

    @property
    def installers(self) -> str:
        return "/".join(sorted({r.installer for r in self.runs}))


# -- preparing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Wheel:
    """One exts_list entry: project, version, the cached wheel, its sha256."""

    project: str
    version: str
    path: Path
    checksum: str

    def entry(self) -> tuple[str, str, Path, str]:
        return (self.project, self.version, self.path, self.checksum)


@dataclass(frozen=True)
class Module:
    """A stand-in site module (CUDA, cuDNN, ...) and the install root it points at."""

    name: str
    version: str
    root: Path


@dataclass(frozen=True)
class Inputs:
    """What every run reuses: the cached wheels by set, the Python venv, the stand-in modules,
    torch's pinned CUDA projects (for upstream's dummy bundle), the toolchain."""

    stack: Stack
    wheel_sets: dict[str, tuple[Wheel, ...]]
    python_root: Path
    toolchain: str  # "system" or "gcccore"
    modules: tuple[Module, ...] = ()
    pins: tuple[tuple[str, str], ...] = ()

    @property
    def wheels(self) -> tuple[Wheel, ...]:
        return self.wheel_sets["all"]


def _wheel(path: Path) -> Wheel:
    from packaging.utils import canonicalize_name, parse_wheel_filename

    name, version, _, _ = parse_wheel_filename(path.name)
    return Wheel(str(canonicalize_name(name)), str(version), path, sha256(path))


def prepare(stack: Stack, toolchain: str) -> Inputs:
    """The cached wheels, Python venv and stand-in modules, through the test harness and its
    locks; checksums are computed here, before anything is timed."""
    with cache_lock("pyroot"):
        python_root = make_python_root(cache_dir())
    from torchstack.paths import easyblocks_path

    easyblocks_path()  # fails early without torchstack's easyblocks; imported before timing
    if stack.key == "cpu":
        wheel = download_wheel(f"torch=={stack.version}")
        if "+cpu" not in wheel.name:
            raise BenchError(f"pip served {wheel.name}, not the {stack.version}+cpu build")
        return Inputs(stack, {"all": (_wheel(wheel),)}, python_root, toolchain)
    with cache_lock("cuda-stack"):
        found = download_stack(cache_dir() / "cuda-stack")
    every = tuple(_wheel(path) for name, path in sorted(found.items())
                  if name not in IN_PYTHON_MODULE)
    python = tuple(w for w in every if w.project in PYTHON_WHEELS)
    with cache_lock("cuda-modules"):
        roots = make_module_roots(cache_dir() / "cuda-modules", found)
    versions = module_versions(found)
    modules = tuple(Module(name, versions[name], root) for name, root in sorted(roots.items()))
    return Inputs(stack, {"all": every, "python": python}, python_root, toolchain, modules,
                  _cuda_pins(found["torch"]))


def _cuda_pins(torch_wheel: Path) -> tuple[tuple[str, str], ...]:
    """torch's pinned CUDA projects on this Python and machine: upstream's dummy bundle."""
    import platform

    from torchstack import cudalibs
    from torchstack.distributions import open_wheel

    with open_wheel(torch_wheel) as torch:
        pins = cudalibs.cuda_pins(torch.requires_dist, f"{sys.version_info[0]}."
                                  f"{sys.version_info[1]}", platform.machine())
    return tuple(sorted({(pin.project, pin.version) for pin in pins}))


def _toolchain(inputs: Inputs) -> str:
    if inputs.toolchain == "system":
        return "SYSTEM"
    return f"{{'name': 'GCCcore', 'version': '{GCC_VERSION}'}}"


def _module_dependencies(inputs: Inputs) -> list[tuple[Any, ...]]:
    """The stand-in modules as dependencies, at SYSTEM level as a site's CUDA module is."""
    if inputs.toolchain == "system":
        return [(m.name, m.version) for m in inputs.modules]
    return [(m.name, m.version, "", SYSTEM_DEP) for m in inputs.modules]


def setup_env(root: Path, inputs: Inputs) -> EasyBuildEnv:
    """A fresh EasyBuild tree with the Python module, the toolchain and the stand-in modules."""
    env = EasyBuildEnv(root, inputs.python_root).setup()
    if inputs.toolchain == "gcccore":
        write_gcccore_toolchain(env)
    for module in inputs.modules:
        write_module(env.site_modules, module.name, module.version, module.root)
    return env


def write_easyconfig(variant: Variant, env: EasyBuildEnv, inputs: Inputs) -> Path:
    stack = inputs.stack
    wheels = inputs.wheel_sets[variant.wheel_set]
    dependencies = _module_dependencies(inputs) if variant.wheel_set == "python" else []
    path = env.root / f"PyTorch-{stack.version}{stack.versionsuffix}.eb"
    if variant.easyblock == "PyTorchWheels":
        cuda_libs = f"cuda_libs = {variant.cuda_libs!r}\n" if variant.cuda_libs else ""
        return wheel_easyconfig(
            path, "PyTorch", stack.version, [w.entry() for w in wheels],
            dependencies=dependencies, versionsuffix=stack.versionsuffix,
            extra=MODEXTRAPATHS + cuda_libs, toolchain=_toolchain(inputs),
        )
    if dependencies:  # torch's pins, met by dummy packages as upstream's CUDA-wheel-bundle does
        dependencies.append(("CUDA-wheel-bundle", stack.version))
    path.write_text(UPSTREAM_EASYCONFIG.format(
        name="PyTorch", version=stack.version, versionsuffix=stack.versionsuffix,
        description=UPSTREAM_DESCRIPTION, toolchain=_toolchain(inputs),
        dependencies=_dependencies_text(dependencies),
        body=_upstream_exts(wheels) + "\n" + MODEXTRAPATHS,
    ))
    return path


def _dependencies_text(dependencies: list[tuple[Any, ...]]) -> str:
    lines = [f"    {dep!r}," for dep in [("Python", PYTHON_VERSION), *dependencies]]
    return "[\n" + "\n".join(lines) + "\n]"


def _upstream_exts(wheels: tuple[Wheel, ...]) -> str:
    """exts_list in upstream's form: the sha256 in the dict form; only torch and triton are
    imported, as in upstream's PyTorch and Triton easyconfigs (nvidia-* and cuda-* wheels have
    no module of their name)."""
    entries = []
    for wheel in wheels:
        imported = wheel.project in ("torch", "triton")
        modulename = "" if imported else "        'modulename': False,\n"
        entries.append(
            f"    ({wheel.project!r}, {wheel.version!r}, {{\n"
            f"        'sources': [{wheel.path.name!r}],\n"
            f"        'checksums': [{{\n"
            f"            {wheel.path.name!r}:\n"
            f"                {wheel.checksum!r},\n"
            f"        }}],\n{modulename}"
            f"    }}),")
    return "exts_list = [\n" + "\n".join(entries) + "\n]\n"


DUMMY_BUNDLE = """\
easyblock = 'PythonBundle'

name = 'CUDA-wheel-bundle'
version = '{version}'

homepage = 'https://developer.nvidia.com/cuda'
description = "Dummy packages for torch's pinned CUDA wheels (torchstack benchmark)"

toolchain = {toolchain}

dependencies = [('Python', '{python}')]

dummy_package = True

exts_list = {exts}

moduleclass = 'lib'
"""


def install_dummy_bundle(env: EasyBuildEnv, inputs: Inputs) -> None:
    """Upstream's CUDA-wheel-bundle for the upstream-modules variant, before the timed run."""
    easyconfig = env.root / f"CUDA-wheel-bundle-{inputs.stack.version}.eb"
    easyconfig.write_text(DUMMY_BUNDLE.format(
        version=inputs.stack.version, toolchain=_toolchain(inputs), python=PYTHON_VERSION,
        exts=repr(list(inputs.pins))))
    result = env.run_eb(str(easyconfig))
    if result.returncode != 0:
        raise BenchError(f"the dummy CUDA-wheel-bundle failed, {easyconfig}:\n{tail(result)}")


def eb_command(variant: Variant, env: EasyBuildEnv, easyconfig: Path) -> list[str]:
    """Ours through the harness (with --include-easyblocks); upstream's needs no include."""
    if variant.easyblock == "PyTorchWheels":
        return env.eb_command(str(easyconfig))
    return [sys.executable, "-m", "easybuild.main", str(easyconfig),
            "--allow-use-as-root-and-accept-consequences"]


EMPTY_EASYCONFIG = """\
easyblock = 'Bundle'

name = 'Empty'
version = '1.0'

homepage = 'https://pytorch.org/'
description = "Nothing: the fixed cost of an eb run (torchstack benchmark)"

toolchain = {toolchain}

dependencies = [('Python', '{python}')]

postinstallcmds = ['touch %(installdir)s/empty']
sanity_check_paths = {{'files': ['empty'], 'dirs': []}}

moduleclass = 'ai'
"""


# -- the floor: the same work without EasyBuild or an installer ------------------------------


def _timed(floor: dict[str, float], key: str, command: list[str], may_fail: bool = False,
           env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    """Run `command`; its wall time into floor[key], its processor time into floor["cpu:key"].
    `may_fail`: a byte-compile exits 1 when a file does not compile (torch ships a few such
    test inputs); the installers skip those files too."""
    result = timed_run(command, env=env, cwd=cwd)
    if result.returncode != 0 and not (may_fail and result.returncode == 1):
        raise BenchError(f"{' '.join(command)} failed:\n{tail(result)}")
    floor[key] = result.seconds
    floor[f"cpu:{key}"] = result.cpu_seconds


def _sum(floor: dict[str, float], key: str, *parts: str) -> None:
    for prefix in ("", "cpu:"):
        floor[prefix + key] = sum(floor[prefix + part] for part in parts)


def measure_floor(inputs: Inputs, wheel_set: str, root: Path) -> dict[str, float]:
    """Seconds of each floor for one set of wheels, measured into `root` (removed afterwards),
    and the processor seconds of each ("cpu:" keys)."""
    from torchstack.elf import loader
    from torchstack.install import bytecode
    from torchstack.install.jitcheck import write_script

    python = str(inputs.python_root / "bin" / "python")
    unpacked, copy = root / "unpacked", root / "copy"
    # the modules' libraries, as their modules put them on LD_LIBRARY_PATH
    libraries = ":".join(str(m.root / "lib") for m in inputs.modules) if wheel_set == "python" \
        else ""
    environ = dict(os.environ, PYTHONPATH=str(copy), LD_LIBRARY_PATH=libraries)
    floor: dict[str, float] = {}
    try:
        root.mkdir(parents=True)
        for wheel in inputs.wheel_sets[wheel_set]:
            with zipfile.ZipFile(wheel.path) as archive:
                archive.extractall(unpacked)
        _timed(floor, "copy", ["cp", "-a", str(unpacked), str(copy)])
        _timed(floor, "compileall", [python, "-m", "compileall", "-q", "-j0", str(copy)],
               may_fail=True)
        for cache in list(copy.rglob("__pycache__")):
            shutil.rmtree(cache)
        _timed(floor, "bytecode", [python, bytecode.__file__, str(copy)], may_fail=True)
        # the least of the two ways of compiling the same files on all cores
        fastest = min(("compileall", "bytecode"), key=lambda key: floor[key])
        _sum(floor, "compile", fastest)
        _sum(floor, "copy_compile", "copy", "compile")
        _timed(floor, "import", [python, "-c", "import torch"], env=environ, cwd=root)
        start, processor = time.perf_counter(), time.process_time()
        for path in loader.iter_shared_objects(copy):
            loader.read_object(path)
        floor["read_objects"] = time.perf_counter() - start
        floor["cpu:read_objects"] = time.process_time() - processor
        if inputs.toolchain == "gcccore":
            _timed(floor, "cxx", [python, str(write_script(root))], env=environ, cwd=root)
        env = setup_env(root / "eb", inputs)
        easyconfig = env.root / "Empty-1.0.eb"
        easyconfig.write_text(EMPTY_EASYCONFIG.format(toolchain=_toolchain(inputs),
                                                      python=PYTHON_VERSION))
        _timed(floor, "empty_eb", env.eb_command(str(easyconfig)), env=env.environ(),
               cwd=env.root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return floor


# -- reading the eb log --------------------------------------------------------------------

LOG_LINE = re.compile(r"^== (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ [A-Z]+ (.*)$")
LOG_PATH = re.compile(r"Results of the build can be found in the log file\(s\) (\S+)")
STEP_START = re.compile(r"Starting (\w+) step$")
SHELL_START = re.compile(r"Running shell command in ")
PLAIN_START = re.compile(r"Running command in ")
SHELL_END = re.compile(r"Shell command (?:completed|FAILED|failed)")
PLAIN_END = re.compile(r"Command (?:completed|FAILED|failed)")
INSTALL_CMD = re.compile(r"(?:\buv pip|-m pip) install\b")
UV_INSTALL_CMD = re.compile(r"\buv pip install\b")
IMPORT_CMD = re.compile(r"-c ([\"'])import [\w., ]+\1\s*$")  # exts_filter, not the probes
# EasyBuild notes the thread of a command run from one
IN_THREAD = r"(?: \(via thread with ID \d+\))?\s*$"
CXX_CMD = re.compile(r"torchstack_jit_check\.py" + IN_THREAD)
# ours, in a thread: logged without quotes (a command list, joined)
IMPORT_THREAD_CMD = re.compile(r" -c import [\w., ]+" + IN_THREAD)
COMPILE_CMD = re.compile(r"/bytecode\.py\b")  # ours (torchstack.install.bytecode), in a thread
# torchstack's own timing lines (torchstack/install/steps.py)
# (the library resolution runs in a thread beside the sanity commands: "waited" is the part of
# it that the eb run waited for, the rest overlaps them)
TORCHSTACK_TIMING = re.compile(r"^torchstack: (fingerprint|library resolution|C\+\+ extension "
                               r"build|byte-compile|import check) took ([\d.]+) s"
                               r"(?:, waited for ([\d.]+) s)?$")
TIMING_ROWS = {"fingerprint": "post.fingerprint", "library resolution": "sanity.libraries",
               "C++ extension build": "sanity.cxx", "byte-compile": "compile",
               "import check": "sanity.import"}
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


@dataclass
class _Open:
    """A command whose start line was read and whose end line was not yet."""

    start: datetime
    text: str = ""

    def closed(self, end: datetime) -> Command:
        return Command(self.start, (end - self.start).total_seconds(), self.text)


# torchstack's commands that run in a thread, by the row of their timing line
BACKGROUND = (("compile", COMPILE_CMD), ("sanity.import", IMPORT_THREAD_CMD),
              ("sanity.cxx", CXX_CMD))
# how far an end line may lie from where a background command's timing line puts its end
END_SLACK = timedelta(seconds=0.25)


def _background_row(command: _Open | Command) -> str | None:
    return next((row for row, pattern in BACKGROUND if pattern.search(command.text)), None)


def _is_background(command: _Open | Command) -> bool:
    return _background_row(command) is not None


def _parse_log(text: str) -> Log:
    """The steps, commands, torchstack timing lines and last timestamp of an eb log.

    EasyBuild's log names no command in its end lines. Shell commands (bash) run one at a time
    and end in "Shell command ..."; other commands end in "Command ...", and among them are
    torchstack's own that run in a thread beside the others (byte-compile, import check, C++
    extension build). Their timing lines say how long each took, so an end line where one of
    them should end closes it; any other end closes the running foreground command, else the
    oldest background one.
    """
    took = {TIMING_ROWS[m.group(1)]: timedelta(seconds=float(m.group(2)))
            for m in map(TORCHSTACK_TIMING.match, _messages(text)) if m is not None}
    timings: dict[str, float] = {}
    steps: list[tuple[str, datetime]] = []
    commands: list[Command] = []
    shell: _Open | None = None
    plain: list[_Open] = []
    reading: _Open | None = None  # the command whose text is on the next line
    last: datetime | None = None
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if match is None:
            if reading is not None and line.strip():
                reading.text, reading = line.strip(), None
            continue
        reading = None
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
        elif SHELL_START.match(message):
            shell = reading = _Open(stamp)
        elif PLAIN_START.match(message):
            reading = _Open(stamp)
            plain.append(reading)
        elif SHELL_END.match(message) and shell is not None:
            commands.append(shell.closed(stamp))
            shell = None
        elif PLAIN_END.match(message) and plain:
            done = _ended(plain, stamp, took)
            plain.remove(done)
            commands.append(done.closed(stamp))
    if not steps or last is None:
        raise ValueError("no steps in the log")
    return Log(steps, commands, last, timings)


def _messages(text: str) -> list[str]:
    return [m.group(2) for m in map(LOG_LINE.match, text.splitlines()) if m is not None]


def _ended(running: list[_Open], stamp: datetime, took: dict[str, timedelta]) -> _Open:
    """Which of the running plain commands an end line at `stamp` closes."""

    def off(command: _Open) -> timedelta | None:
        """How far `stamp` lies from where the command's timing line puts its end."""
        row = _background_row(command)
        if row is None or row not in took:
            return None
        return abs(command.start + took[row] - stamp)

    due = [(distance, c) for c in running
           if (distance := off(c)) is not None and distance <= END_SLACK]
    if due:
        return min(due, key=lambda pair: pair[0])[1]
    foreground = [c for c in running if not _is_background(c)]
    return foreground[-1] if foreground else running[0]


def breakdown(stdout: str, wall: float, use: CoreUse | None = None,
              started: float = 0.0) -> tuple[dict[str, float], str]:
    """Seconds per row of ROWS for one run (empty when the log cannot be read), installer;
    with `use`, sampled from the run that began at time.time() `started`, the cores busy in
    each part of CORE_PARTS too."""
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
    background = [c for c in commands if _is_background(c)]
    phases["ext.commands"] = (sum(c.seconds for c in within("ext") if c not in background)
                              - phases["ext.install"])
    phases["ext.eb"] = phases["ext"] - phases["ext.install"] - phases["ext.commands"]
    sanity = within("sanity")
    phases["sanity.import"] = sum(c.seconds for c in sanity if IMPORT_CMD.search(c.text))
    phases["sanity.pip"] = sum(c.seconds for c in sanity if PIP_CMD.search(c.text))
    # the C++ extension build runs in a thread: its own timing lines say how long it took and
    # how long the run waited for it (only with a toolchain that has a compiler; a row left
    # out prints as "-")
    serial = [c for c in sanity if c not in background]
    phases["sanity.commands"] = (sum(c.seconds for c in serial) - phases["sanity.import"]
                                 - phases["sanity.pip"])
    phases.update(parsed.timings)  # only ours: fingerprint, library resolution, C++ build
    phases["sanity.eb"] = (phases["sanity"] - sum(c.seconds for c in serial)
                           - phases.get("sanity.libraries.wait", 0.0)
                           - phases.get("sanity.import.wait", 0.0)
                           - phases.get("sanity.cxx.wait", 0.0))
    # ours byte-compiles in a thread after uv's install; upstream's pip inside its command
    phases["install_compile"] = phases["ext.install"] + phases.get("compile", 0.0)
    # the parts below it in the floor table, as far as the run waited for them
    phases["fixed"] = wall - phases.get("sanity.import.wait", phases["sanity.import"]) - sum(
        phases.get(k, 0.0) for k in ("ext.install", "compile.wait", "sanity.cxx.wait",
                                     "sanity.pip", "post.fingerprint", "sanity.libraries.wait"))
    if use is not None:
        phases.update(core_use(steps, use, started, started + wall))
    installer = "?"
    if installs:
        installer = "uv" if UV_INSTALL_CMD.search(installs[0].text) else "pip"
    return phases, installer


def core_use(steps: list[tuple[str, datetime]], use: CoreUse, started: float,
             ended: float) -> dict[str, float]:
    """For each part of CORE_PARTS: its seconds ("span.<part>") and the cores of the machine
    busy in it on average ("cores.<part>"); a part too short to tell gets no cores entry."""
    first: dict[str, float] = {}
    for name, stamp in steps:
        first.setdefault(name, stamp.timestamp())  # eb logs local time, as time.time() counts
    figures: dict[str, float] = {}
    for key, _, begin, end in CORE_PARTS:
        start = started if begin is None else first.get(begin)
        stop = ended if end is None else first.get(end)
        if start is None or stop is None:
            continue
        figures[f"span.{key}"] = stop - start
        busy = use.busy_cores(start, stop)
        if busy is not None:
            figures[f"cores.{key}"] = busy
    return figures


# -- measuring -----------------------------------------------------------------------------


def tail(result: Any) -> str:
    """The end of a finished command's output (.stdout and .stderr)."""
    return (f"--- stdout (tail) ---\n{result.stdout[-TAIL_CHARS:]}\n"
            f"--- stderr (tail) ---\n{result.stderr[-TAIL_CHARS:]}")


def run_once(variant: Variant, root: Path, inputs: Inputs) -> Run:
    """One eb run into a fresh tree `root`, which is removed afterwards."""
    try:
        env = setup_env(root, inputs)
        for wheel in inputs.wheel_sets[variant.wheel_set]:
            env.stage_source("PyTorch", wheel.path)
        if variant.easyblock == "PythonBundle" and variant.wheel_set == "python":
            install_dummy_bundle(env, inputs)
        easyconfig = write_easyconfig(variant, env, inputs)
        with sampled() as use:
            started = time.time()
            result = timed_run(eb_command(variant, env, easyconfig), env=env.environ(),
                               cwd=env.root)
        if result.returncode != 0:
            raise BenchError(f"eb failed for {variant.label} (exit {result.returncode}), "
                             f"{easyconfig}:\n{tail(result)}")
        phases, installer = breakdown(result.stdout, result.seconds, use, started)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return Run(result.seconds, result.max_rss_kb, phases, installer, result.cpu_seconds)


def measure(
    inputs: Inputs, rounds: int, workdir: Path
) -> tuple[list[Series], dict[str, list[dict[str, float]]]]:
    """Each round: one run of each variant, then the floor of each set of wheels; all
    interleaved."""
    series = [Series(v) for v in inputs.stack.variants]
    floors: dict[str, list[dict[str, float]]] = {
        v.wheel_set: [] for v in inputs.stack.variants}
    for number in range(1, rounds + 1):
        for entry in series:
            root = workdir / f"{entry.variant.key}-{number}"
            run = run_once(entry.variant, root, inputs)
            entry.runs.append(run)
            log(f"round {number}/{rounds} {entry.variant.label}: {run.seconds:.1f} s, "
                f"peak RSS {run.max_rss_kb / 1024:.0f} MB (installer: {run.installer})")
        for wheel_set, measured in floors.items():
            measured.append(measure_floor(inputs, wheel_set, workdir / f"floor-{number}"))
            floor = measured[-1]
            log(f"round {number}/{rounds} floor ({wheel_set} wheels): " + ", ".join(
                f"{key} {value:.1f} s (cpu {floor['cpu:' + key]:.1f} s)"
                for key, value in floor.items() if not key.startswith("cpu:")))
    return series, floors


def floor_medians(floors: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(f[key] for f in floors if key in f) for key in floors[0]}


# -- the report ----------------------------------------------------------------------------


def figures(series: list[Series], floors: dict[str, list[dict[str, float]]], inputs: Inputs,
            rounds: int, load: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Any]:
    by_key = {s.variant.key: s for s in series}
    ratios: dict[str, dict[str, Any]] = {
        s.variant.key: {
            "anchor": s.variant.anchor,
            "median": s.median / by_key[s.variant.anchor].median,
            "min": s.minimum / by_key[s.variant.anchor].minimum,
        }
        for s in series if s.variant.anchor is not None
    }
    stack = inputs.stack
    target = None
    if stack.target is not None:
        value = float(ratios["ours"]["median"])
        target = {"max_ratio": stack.target, "value": value, "met": value <= stack.target}
    return {
        "stack": stack.key,
        "torch": stack.version,
        "toolchain": inputs.toolchain,
        "rounds": rounds,
        "wheels": {name: [w.path.name for w in wheels]
                   for name, wheels in inputs.wheel_sets.items()},
        "wheel_bytes": {name: sum(w.path.stat().st_size for w in wheels)
                        for name, wheels in inputs.wheel_sets.items()},
        "python": sys.executable,
        "cpus": os.cpu_count(),
        "loadavg_start": list(load[0]),
        "loadavg_end": list(load[1]),
        "variants": {
            s.variant.key: {
                "label": s.variant.label,
                "easyblock": s.variant.easyblock,
                "wheel_set": s.variant.wheel_set,
                "cuda_libs": s.variant.cuda_libs,
                "installer": s.installers,
                "median_s": s.median,
                "min_s": s.minimum,
                "peak_rss_mb": s.peak_mb,
                "seconds": [r.seconds for r in s.runs],
                "max_rss_kb": [r.max_rss_kb for r in s.runs],
                "cpu_median_s": s.cpu_median,
                "cpu_s": [r.cpu_seconds for r in s.runs],
                "phases_median_s": {k: s.phase_median(k) for k, _ in ROWS},
                "phases_s": [r.phases for r in s.runs],
            }
            for s in series
        },
        "ratio": ratios,
        "floor": {name: {"median_s": floor_medians(measured), "rounds": measured}
                  for name, measured in floors.items()},
        "target": target,
    }


def _cell(value: float | None, missing: str = "n/a") -> str:
    return f"{value:>9.1f}" if value is not None else f"{missing:>9}"


def table(series: list[Series], data: dict[str, Any]) -> str:
    width = max(len(s.variant.label) for s in series)
    sets = ", ".join(f"{name}: {len(names)} wheel(s), {data['wheel_bytes'][name] / 1e6:,.0f} MB"
                     for name, names in data["wheels"].items())
    lines = [
        f"eb wall time, torch {data['torch']} ({data['stack']}; {sets}), "
        f"{data['toolchain']} toolchain,",
        f"{data['rounds']} round(s) interleaved, fresh install path per run; peak RSS: the "
        "largest process of the eb process tree",
        "",
        f"{'variant':<{width}}  {'installer':>9}  {'median s':>9}  {'min s':>9}  "
        f"{'peak RSS MB':>11}  runs s",
    ]
    for s in series:
        runs = " ".join(f"{r.seconds:.1f}" for r in s.runs)
        lines.append(f"{s.variant.label:<{width}}  {s.installers:>9}  {s.median:>9.1f}  "
                     f"{s.minimum:>9.1f}  {s.peak_mb:>11.0f}  {runs}")
    lines.append("")
    for key, ratio in data["ratio"].items():
        lines.append(f"{key}/{ratio['anchor']}: {ratio['median']:.2f}x (medians), "
                     f"{ratio['min']:.2f}x (minima)")
    by_key = {s.variant.key: s for s in series}
    if data["target"] is not None:
        target = data["target"]
        upstream = by_key[data["ratio"]["ours"]["anchor"]].median
        floor = whole_floor(data["floor"]["all"]["median_s"])
        met = "met" if target["met"] else "NOT met"
        lines += [
            f"target <= {target['max_ratio']:.2f}x upstream (reported, not enforced): {met}",
            f"the target is {target['max_ratio'] * upstream:.1f} s; the floor of a whole "
            f"install (below) is {floor:.1f} s = {floor / upstream:.2f}x upstream",
        ]
    lines += [
        "",
        "where the time goes, median s per row over the rounds (from the eb logs' timestamps;",
        "medians of rows need not add up exactly):",
    ]
    label_width = max(len(label) for _, label in ROWS)
    lines.append(f"{'':<{label_width}}  " + "  ".join(f"{s.variant.key:>9}" for s in series))
    for key, label in ROWS:
        lines.append(f"{label:<{label_width}}  "
                     + "  ".join(_cell(s.phase_median(key)) for s in series))
    for name, floor in data["floor"].items():
        members = [s for s in series if s.variant.wheel_set == name]
        lines += ["", f"wheels: {name} ({WHEEL_SETS[name]})",
                  *floor_table(members, floor["median_s"]),
                  "", *processor_lines(members, floor["median_s"], by_key, data["cpus"])]
    lines += ["", *core_lines(series, data["cpus"] or 1)]
    start, end = data["loadavg_start"], data["loadavg_end"]
    lines += [
        "",
        f"{data['cpus']} CPUs; load average {start[0]:.2f} at start, {end[0]:.2f} at end "
        "(other jobs on the machine make these figures noisy)",
    ]
    return "\n".join(lines)


WHOLE_FLOOR = ("empty_eb", "copy_compile", "import")


def whole_floor(floor: dict[str, float], prefix: str = "") -> float:
    """The least an install with its import check can take: an empty eb run, the copy, the
    byte-compile and one import; with prefix "cpu:", the processor time of that work."""
    return sum(floor[prefix + k] for k in WHOLE_FLOOR if prefix + k in floor)


def processor_lines(series: list[Series], floor: dict[str, float], by_key: dict[str, Series],
                    cpus: int | None) -> list[str]:
    """Processor time against wall time: work that takes P processor seconds cannot end in
    less than P / cores seconds on this machine, however well it overlaps."""
    cores = cpus or 1
    rows = [(s.variant.label, s.cpu_median, s.median, s.variant.anchor) for s in series]
    rows.append(("floor of a whole install", whole_floor(floor, "cpu:"), whole_floor(floor),
                 next((s.variant.anchor for s in series if s.variant.anchor), None)))
    width = max(len(label) for label, *_ in rows)
    lines = ["processor time, user + system of the whole process tree (wait4), medians; work "
             f"of P cpu s takes at least P / {cores} s on {cores} cores:",
             f"{'':<{width}}  {'cpu s':>7}  {'wall s':>7}  {'cores busy':>10}  "
             f"{'P/cores s':>9}  {'= x anchor':>10}"]
    for label, processor, wall, anchor in rows:
        bound = processor / cores
        ratio = f"{bound / by_key[anchor].median:>9.2f}x" if anchor else f"{'':>10}"
        lines.append(f"{label:<{width}}  {processor:>7.1f}  {wall:>7.1f}  "
                     f"{processor / wall:>10.2f}  {bound:>9.1f}  {ratio}")
    return lines


def core_lines(series: list[Series], cores: int) -> list[str]:
    """Busy cores of the whole machine (/proc/stat) in each part of a run, and the core
    seconds left idle there: work that could overlap can only use those."""
    width = max(len(label) for _, label, _, _ in CORE_PARTS)
    lines = [f"cores busy on the whole machine (/proc/stat, every {SAMPLE_MS} ms), medians; idle: "
             f"core seconds left unused ({cores} cores x s - busy):",
             f"{'':<{width}}  " + "  ".join(f"{s.variant.key + ': s':>12}  {'busy':>5}  "
                                               f"{'idle':>5}" for s in series)]
    idle_sums = [0.0 for _ in series]
    for key, label, _, _ in CORE_PARTS:
        cells = []
        for index, entry in enumerate(series):
            span, busy = entry.phase_median(f"span.{key}"), entry.phase_median(f"cores.{key}")
            idle = span * (cores - busy) if span is not None and busy is not None else None
            idle_sums[index] += idle or 0.0
            cells.append(f"{_cell(span, '-'):>12}  {_busy(busy)}  {_busy(idle)}")
        lines.append(f"{label:<{width}}  " + "  ".join(cells))
    lines.append(f"{'idle core seconds in all':<{width}}  " + "  ".join(
        f"{'':>12}  {'':>5}  {idle:>5.1f}" for idle in idle_sums))
    return lines


def _busy(value: float | None) -> str:
    return f"{value:>5.2f}" if value is not None else f"{'-':>5}"


def floor_table(series: list[Series], floor: dict[str, float]) -> list[str]:
    """Each part of a run next to its floor on this machine, medians; '-' where none."""
    label_width = max(len(label) for label, _, _ in PARTS)
    keys = [s.variant.key for s in series]
    lines = [
        "distance to the floor, median s (floor: the same work measured without EasyBuild or an",
        "installer in the same bench run; '-': no floor, or not run by that easyblock):",
        f"{'':<{label_width}}  {'floor':>9}  " + "  ".join(
            f"{k:>16}  {'-floor':>9}" for k in keys),
    ]
    for label, row, floor_key in PARTS:
        bottom = floor.get(floor_key) if floor_key else None
        cells = []
        for entry in series:
            value = entry.phase_median(row) if row else None
            over = value - bottom if value is not None and bottom is not None else None
            cells.append(f"{_cell(value, '-'):>16}  {_cell(over, '-')}")
        lines.append(f"{label:<{label_width}}  {_cell(bottom, '-')}  " + "  ".join(cells))
    total = whole_floor(floor)
    lines.append(f"{'floor of a whole install':<{label_width}}  {_cell(total)}  " + "  ".join(
        f"{_cell(s.median):>16}  {_cell(s.median - total)}" for s in series))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--stack", choices=sorted(STACKS), default="cpu",
                        help="cpu: the torch 2.13.0+cpu wheel (default); cuda13: torch 2.14.1 "
                             "with its CUDA 13 wheels or modules (about 3 GB of wheels, 5 GB "
                             "per install)")
    parser.add_argument("--toolchain", choices=("system", "gcccore"), default="system",
                        help="gcccore: a toolchain with the system's gcc, so that PyTorchWheels "
                             "builds its C++ extension at sanity check (default: system)")
    parser.add_argument("--rounds", type=positive, default=DEFAULT_ROUNDS,
                        help=f"rounds, each one run of each variant (default {DEFAULT_ROUNDS})")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON on stdout too (the table then goes "
                             "to stderr)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="torchstack-bench-install-"))
    try:
        inputs = prepare(STACKS[args.stack], args.toolchain)
        log(f"wheels: {', '.join(w.path.name for w in inputs.wheels)}\n"
            f"python: {inputs.python_root}\nwork dir: {workdir}")
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
