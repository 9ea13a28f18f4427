"""What doctor tells: findings with a severity, a stable code, a message and a fix.

A problem breaks something the user will run into (exit 1); a warning may; an info line
says what was checked and found in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from torchstack.errors import TorchstackError

Severity = Literal["problem", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("problem", "warning", "info")


class DoctorError(TorchstackError):
    """An environment doctor cannot inspect: no such interpreter, or one that does not answer."""


@dataclass(frozen=True)
class Finding:
    """One diagnosis; `fix` says what to do, None when nothing needs doing."""

    severity: Severity
    code: str
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "fix": self.fix}


def problem(code: str, message: str, fix: str | None = None) -> Finding:
    return Finding("problem", code, message, fix)


def warning(code: str, message: str, fix: str | None = None) -> Finding:
    return Finding("warning", code, message, fix)


def info(code: str, message: str, fix: str | None = None) -> Finding:
    return Finding("info", code, message, fix)


def by_severity(findings: Iterable[Finding]) -> dict[Severity, list[Finding]]:
    """Findings grouped problem, warning, info; each group in the order found."""
    groups: dict[Severity, list[Finding]] = {s: [] for s in SEVERITIES}
    for finding in findings:
        groups[finding.severity].append(finding)
    return groups


def exit_code(findings: Iterable[Finding]) -> int:
    """0 when healthy, 1 when any problem was found."""
    return 1 if any(f.severity == "problem" for f in findings) else 0
