"""Whether torch.utils.cpp_extension can JIT-compile here: ninja, a CUDA toolkit, a compiler.

The toolkit is searched as cpp_extension's _find_cuda_home searches it: $CUDA_HOME, else
$CUDA_PATH, else the folder above the folder of `nvcc` on PATH, else /usr/local/cuda if it
exists. A set $CUDA_HOME is taken as it is, even when it points nowhere. Packages call
is_ninja_available() and JIT-compile only when ninja is present, so a CUDA torch with ninja
and no toolkit fails at the first such import, while a CPU-only torch never needs a toolkit.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from torchstack._files import MAX_CONFIG, FileKindError, read_text
from torchstack.doctor.findings import Finding, info, problem, warning
from torchstack.elf import reader
from torchstack.fingerprint.read import Fingerprint

log = logging.getLogger(__name__)

DEFAULT_CUDA_HOME = "/usr/local/cuda"
_RELEASE = re.compile(r"release (\d+\.\d+)")
_GCC_COMMENT = re.compile(r"GCC: \([^)]*\) (\d+)\.(\d+)(?:\.(\d+))?")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_EXAMPLE = ("packages that JIT-compile CUDA extensions when ninja is present (e.g. "
            "DeformableDetr's MultiScaleDeformableAttention in older transformers)")
_TIMEOUT = 60


@dataclass(frozen=True)
class Toolkit:
    """The CUDA toolkit cpp_extension would use: where, found how, which version, or why not."""

    home: str | None
    how: str
    version: str | None
    defect: str | None  # why it cannot build: missing folder, nvcc or headers

    @property
    def usable(self) -> bool:
        return self.home is not None and self.defect is None


@dataclass(frozen=True)
class Compiler:
    """The C++ compiler cpp_extension calls ($CXX, else c++) and its version line."""

    command: str
    path: str | None
    family: str | None  # "gcc" or "clang"
    version: str | None


@dataclass(frozen=True)
class JitReadiness:
    ninja: str | None
    toolkit: Toolkit | None  # None: a CPU-only torch, no toolkit needed
    compiler: Compiler
    torch_compiler: str | None  # e.g. "GCC 13.3.1", from torch/_C's .comment

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def find_toolkit(environ: Mapping[str, str], default_home: str = DEFAULT_CUDA_HOME) -> Toolkit:
    """cpp_extension's search order, then a check of what the build will need from it."""
    home, how = None, "not found"
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(variable):
            home, how = environ[variable], f"${variable}"
            break
    else:
        nvcc = shutil.which("nvcc", path=environ.get("PATH", os.defpath))
        if nvcc is not None:
            home, how = os.path.dirname(os.path.dirname(nvcc)), f"nvcc on PATH ({nvcc})"
        elif os.path.exists(default_home):
            home, how = default_home, "the default location"
    if home is None:
        return Toolkit(None, how, None, "no CUDA toolkit: $CUDA_HOME and $CUDA_PATH are unset, "
                                         f"no nvcc on PATH, no {default_home}")
    defect = _toolkit_defect(home, how)
    return Toolkit(home, how, None if defect else toolkit_version(home), defect)


def _toolkit_defect(home: str, how: str) -> str | None:
    if not os.path.isdir(home):
        return f"{how} is {home}, which does not exist"
    if not os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
        return f"{how} gives {home}, which has no bin/nvcc"
    if not os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")):
        return f"{how} gives {home}, which has no include/cuda_runtime.h"
    return None


def toolkit_version(home: str) -> str | None:
    """major.minor from version.json (CUDA 11.1+), version.txt, else `nvcc --version`."""
    try:  # each file that cannot be read (a FIFO too) leaves the question to the next
        data = json.loads(read_text(os.path.join(home, "version.json"), MAX_CONFIG))
        return ".".join(str(data["cuda"]["version"]).split(".")[:2])
    except (OSError, FileKindError, ValueError, KeyError, TypeError, RecursionError) as exc:
        log.debug("%s/version.json: %s", home, exc)
    try:
        found = _VERSION.search(read_text(os.path.join(home, "version.txt"), MAX_CONFIG,
                                          replace=True))
        if found:
            return f"{found.group(1)}.{found.group(2)}"
    except (OSError, FileKindError) as exc:
        log.debug("%s/version.txt: %s", home, exc)
    output = _run([os.path.join(home, "bin", "nvcc"), "--version"])
    match = _RELEASE.search(output or "")
    return match.group(1) if match else None


def find_compiler(environ: Mapping[str, str]) -> Compiler:
    command = environ.get("CXX") or "c++"
    path = shutil.which(command, path=environ.get("PATH", os.defpath))
    if path is None:
        return Compiler(command, None, None, None)
    first = (_run([path, "--version"]) or "").partition("\n")[0]
    family = "clang" if "clang" in first else "gcc" if first else None
    versions = _VERSION.findall(first)
    version = ".".join(v for v in versions[-1] if v) if versions else None
    return Compiler(command, path, family, version)


def torch_compiler(torch_folder: str) -> str | None:
    """'GCC 13.3.1': the first GCC in the .comment section of torch/_C (or libtorch_cpu)."""
    candidates = [os.path.join(torch_folder, "torch", name) for name in
                  sorted(os.listdir(os.path.join(torch_folder, "torch"))) if name.startswith("_C.")]
    candidates.append(os.path.join(torch_folder, "torch", "lib", "libtorch_cpu.so"))
    for path in candidates:
        comment = _comment(path)
        match = _GCC_COMMENT.search(comment)
        if match:
            return "GCC " + ".".join(g for g in match.groups() if g)
    return None


def _comment(path: str) -> str:
    try:
        with reader.map_file(path) as stream:
            data = reader.section_data(stream, path, ".comment")
            return data.decode("utf-8", "replace") if data is not None else ""
    except (OSError, reader.ElfError) as exc:
        log.debug("no .comment from %s: %s", path, exc)
        return ""


def _run(argv: list[str]) -> str | None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("%s: %s", argv, exc)
        return None
    return result.stdout + result.stderr


def readiness(environ: Mapping[str, str], provider: Fingerprint, torch_folder: str,
              default_cuda_home: str = DEFAULT_CUDA_HOME) -> JitReadiness:
    ninja = shutil.which("ninja", path=environ.get("PATH", os.defpath))
    toolkit = find_toolkit(environ, default_cuda_home) if provider.torch.cuda else None
    return JitReadiness(ninja, toolkit, find_compiler(environ), torch_compiler(torch_folder))


def jit_findings(ready: JitReadiness, provider: Fingerprint) -> list[Finding]:
    findings = [_ninja_finding(ready)]
    if ready.toolkit is None:
        findings.append(info("jit-cpu", f"torch {provider.version} is CPU-only: its C++ "
                                        "extensions need no CUDA toolkit"))
    else:
        findings.append(_toolkit_finding(ready, ready.toolkit, provider))
    findings.append(_compiler_finding(ready))
    return findings


def _ninja_finding(ready: JitReadiness) -> Finding:
    if ready.ninja:
        return info("jit-ninja", f"ninja is on PATH ({ready.ninja}): packages will "
                                 "JIT-compile torch extensions")
    return info("jit-no-ninja", "no ninja on PATH: torch.utils.cpp_extension.load() cannot "
                                "JIT-compile, and packages that check for ninja skip it",
                "pip install ninja, if you want JIT-compiled extensions")


def _toolkit_finding(ready: JitReadiness, toolkit: Toolkit, provider: Fingerprint) -> Finding:
    wanted = (provider.torch.cuda or "").split(".")[0]
    if not toolkit.usable:
        failure = ("'CUDA_HOME environment variable is not set'" if toolkit.home is None
                   else f"a missing nvcc or CUDA headers in {toolkit.home}")
        if ready.ninja:
            return problem("jit-no-cuda-toolkit",
                           f"torch {provider.version} is a CUDA build and ninja is on PATH, "
                           f"but {toolkit.defect}: {_EXAMPLE} will fail with {failure}",
                           "load a CUDA module or set CUDA_HOME, or uninstall ninja")
        return info("jit-no-cuda-toolkit", f"{toolkit.defect}: CUDA extensions cannot be "
                                           "JIT-compiled (no package tries without ninja)",
                    f"load a CUDA/{wanted}.x module to build CUDA extensions")
    where = f"CUDA toolkit {toolkit.version or '(version unknown)'} at {toolkit.home} " \
            f"({toolkit.how})"
    if toolkit.version is None or toolkit.version.split(".")[0] == wanted:
        return info("jit-cuda-toolkit", f"{where} fits torch's CUDA {provider.torch.cuda}")
    make = problem if ready.ninja else warning
    return make("jit-cuda-mismatch",
                f"{where} is another major than torch's CUDA {provider.torch.cuda}: "
                "torch.utils.cpp_extension refuses to build CUDA extensions with it",
                f"load a CUDA/{wanted}.x module or set CUDA_HOME to a CUDA {wanted} toolkit")


def _compiler_finding(ready: JitReadiness) -> Finding:
    compiler, built = ready.compiler, ready.torch_compiler
    if compiler.path is None:
        make = warning if ready.ninja else info
        return make("jit-no-compiler", f"no C++ compiler {compiler.command!r} on PATH: "
                                       "C++ extensions cannot be built",
                    "load a GCC module, or set CXX to a C++ compiler")
    name = f"{compiler.command} ({compiler.path}) is {compiler.family or '?'} " \
           f"{compiler.version or '(version unknown)'}"
    if built is None or compiler.family != "gcc" or compiler.version is None:
        built_with = built or "an unknown compiler"
        return info("jit-compiler", f"{name}; torch was built with {built_with}")
    major, built_major = compiler.version.split(".")[0], built.split()[1].split(".")[0]
    if major == built_major:
        return info("jit-compiler", f"{name}, the same major as torch's {built}")
    return warning("jit-compiler-mismatch",
                   f"{name}, torch was built with {built}: extensions built with another "
                   "major may fail to compile or load",
                   f"load a GCC {built_major} module (GCCcore/{built_major}.x), or set CXX to a "
                   f"g++ {built_major}")
