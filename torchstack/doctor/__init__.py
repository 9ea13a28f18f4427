"""Diagnose the PyTorch environment of a Python interpreter, without importing torch.

`diagnose` reads the interpreter's sys.path and the shell environment (loaded modules,
PYTHONPATH, LD_LIBRARY_PATH, PATH, CUDA_HOME, CXX) and checks, in this order: which torch
is active and whether its requirements are met; where torch and its consumers come from and
what shadows what; whether each consumer fits that torch; where every library they need
resolves; whether JIT extension builds can work; with `imports`, what importing them does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from torchstack.doctor.consumers import consumer_findings, torch_findings, verdicts_of
from torchstack.doctor.findings import DoctorError, Finding
from torchstack.doctor.importcheck import import_findings, run_imports, top_level_modules
from torchstack.doctor.interpreter import Interpreter, current, query
from torchstack.doctor.jit import DEFAULT_CUDA_HOME, JitReadiness, jit_findings, readiness
from torchstack.doctor.libraries import library_findings, resolve_stack
from torchstack.doctor.placement import Places, placement_findings
from torchstack.doctor.report import ConsumerState, Report
from torchstack.doctor.requirements import requirement_findings
from torchstack.doctor.stack import Stack, read_stack
from torchstack.doctor.surroundings import Surroundings
from torchstack.doctor.venvcheck import venv_findings

log = logging.getLogger(__name__)


def diagnose(
    interpreter: Interpreter,
    environ: Mapping[str, str],
    *,
    imports: bool = False,
    default_cuda_home: str = DEFAULT_CUDA_HOME,
    system_dirs: Sequence[str] | None = None,
) -> Report:
    """Every finding about the torch stack `interpreter` sees in the environment `environ`.

    `default_cuda_home` is where cpp_extension looks last for a CUDA toolkit;
    `system_dirs` replaces the system library folders of /etc/ld.so.conf (for tests).
    """
    surroundings = Surroundings.from_environ(environ)
    stack = read_stack(interpreter.path)
    findings = torch_findings(stack)
    findings += requirement_findings(stack, interpreter.version_text)
    findings += placement_findings(stack, Places(interpreter, surroundings))
    verdicts = verdicts_of(stack)
    findings += consumer_findings(stack, verdicts)
    findings += venv_findings(stack, interpreter, environ)
    uses, unreadable = resolve_stack(stack, surroundings, interpreter.path, system_dirs)
    findings += library_findings(uses, unreadable, stack, interpreter.version_text)
    jit = _jit(stack, environ, default_cuda_home)
    if jit is not None and stack.provider is not None:
        findings += jit_findings(jit, stack.provider)
    if imports:
        result = run_imports(interpreter.executable, top_level_modules(stack), environ)
        findings += import_findings(result, stack)
    return Report(
        interpreter=interpreter,
        torch_folder=stack.torch.folder if stack.torch else None,
        provider=stack.provider,
        consumers=tuple(ConsumerState(c, v) for c, v in zip(stack.consumers, verdicts)),
        libraries=tuple(uses),
        jit=jit,
        findings=tuple(findings),
    )


def _jit(stack: Stack, environ: Mapping[str, str], default_home: str) -> JitReadiness | None:
    if stack.provider is None or stack.torch is None:
        return None
    return readiness(environ, stack.provider, stack.torch.folder, default_home)


__all__ = ["DEFAULT_CUDA_HOME", "DoctorError", "Finding", "Interpreter", "Report", "current",
           "diagnose", "query"]
