"""`--import`: import torch and each consumer for real, in the inspected interpreter.

The static diagnosis predicts; this confirms. It runs in a subprocess of the inspected
Python, so a crash or a half-initialised torch never touches doctor itself.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchstack.doctor.findings import Finding, info, problem, warning
from torchstack.doctor.stack import Stack

_TIMEOUT = 600
_SCRIPT = """\
import json, sys
out = {"modules": {}}
try:
    import torch
    out["torch"] = {"version": torch.__version__, "file": torch.__file__,
                    "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
except BaseException as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
for name in sys.argv[1:]:
    try:
        __import__(name)
        out["modules"][name] = None
    except BaseException as exc:
        out["modules"][name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass(frozen=True)
class ImportResult:
    """What importing torch and the consumers' top-level modules did."""

    torch: dict[str, object] | None
    torch_error: str | None
    modules: dict[str, str | None]  # top-level module -> None or the exception


def run_imports(executable: str, modules: Sequence[str],
                environ: Mapping[str, str]) -> ImportResult:
    try:
        result = subprocess.run([executable, "-c", _SCRIPT, *modules], capture_output=True,
                                text=True, env=dict(environ), timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ImportResult(None, f"{type(exc).__name__}: {exc}", {})
    lines = result.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
    except (IndexError, ValueError):
        last = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        return ImportResult(None, f"the interpreter died: {last}", {})
    return ImportResult(data.get("torch"), data.get("torch_error"), data.get("modules", {}))


def top_level_modules(stack: Stack) -> list[str]:
    """The importable top-level names of every consumer, from its file listing."""
    names: list[str] = []
    for consumer in stack.consumers:
        for relpath in consumer.placed.dist.listing():
            top, _, rest = relpath.partition("/")
            if rest == "__init__.py" and top.isidentifier() and not top.startswith("_"):
                names.append(top)
    return list(dict.fromkeys(names))


def import_findings(result: ImportResult, stack: Stack) -> list[Finding]:
    findings: list[Finding] = []
    if result.torch_error is not None:
        findings.append(problem("import-torch", f"import torch fails: {result.torch_error}",
                                "fix the problems above; they are what import torch runs into"))
    elif result.torch is not None:
        findings.append(_torch_imported(result.torch, stack))
    for name, error in result.modules.items():
        if error is None:
            findings.append(info("import-consumer", f"import {name}: works"))
        else:
            findings.append(problem("import-consumer", f"import {name} fails: {error}",
                                    "fix the problems above for the package that provides it"))
    return findings


def _torch_imported(torch: dict[str, object], stack: Stack) -> Finding:
    where = str(torch.get("file"))
    message = (f"import torch: {torch.get('version')} from {where}, "
               f"CUDA available: {torch.get('cuda_available')}")
    predicted = stack.torch.folder if stack.torch else None
    if predicted is not None and not where.startswith(predicted.rstrip("/") + "/"):
        return warning("import-torch-elsewhere",
                       f"{message}; doctor expected the torch in {predicted}",
                       "check sys.path manipulation in sitecustomize or .pth files")
    return info("import-torch", message)
