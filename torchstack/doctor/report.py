"""The result of one diagnosis: the stack as found, every finding, and the exit code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchstack.doctor.findings import Finding, exit_code
from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.jit import JitReadiness
from torchstack.doctor.libraries import LibraryUse
from torchstack.doctor.stack import Consumer
from torchstack.fingerprint.compat import Verdict
from torchstack.fingerprint.read import Fingerprint


@dataclass(frozen=True)
class ConsumerState:
    """A consumer on sys.path with compat's verdict on the active torch (a string when the
    two cannot be compared, None without torch)."""

    consumer: Consumer
    verdict: Verdict | str | None

    def to_json(self) -> dict[str, Any]:
        placed, verdict = self.consumer.placed, self.verdict
        compatible = verdict.compatible if isinstance(verdict, Verdict) else None
        reasons = list(verdict.reasons) if isinstance(verdict, Verdict) else \
            [verdict] if verdict else []
        return {"name": placed.dist.name, "version": placed.dist.version,
                "folder": placed.folder, "fingerprint": self.consumer.fingerprint.to_json(),
                "compatible": compatible, "reasons": reasons}


@dataclass(frozen=True)
class Report:
    interpreter: Interpreter
    torch_folder: str | None
    provider: Fingerprint | None
    consumers: tuple[ConsumerState, ...]
    libraries: tuple[LibraryUse, ...]
    jit: JitReadiness | None
    findings: tuple[Finding, ...]

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)

    def to_json(self) -> dict[str, Any]:
        torch = None
        if self.provider is not None:
            torch = {**self.provider.to_json(), "folder": self.torch_folder}
        return {
            "python": self.interpreter.to_json(),
            "torch": torch,
            "consumers": [c.to_json() for c in self.consumers],
            "libraries": [u.to_json() for u in self.libraries],
            "jit": self.jit.to_json() if self.jit else None,
            "findings": [f.to_json() for f in self.findings],
            "healthy": self.exit_code == 0,
        }
