"""A `version.py` read as data: its constant assignments, parsed and never executed.

torch writes `torch/version.py` at build time (`__version__ = '2.14.1+cu130'`,
`cuda: Optional[str] = '13.0'`, `hip = None`); consumers write `<package>/version.py`.
"""

from __future__ import annotations

import ast
import re

CUDA_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")  # fullmatch; ASCII digits only
HIP_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:[-+][0-9A-Za-z._+-]*)?")


class VersionPyError(ValueError):
    """A version.py that does not parse, or whose `cuda` or `hip` is not a version."""


class _NotConstant:
    """What `parse` gives for a name assigned an expression, not a constant."""

    def __repr__(self) -> str:
        return "<not a constant>"


NOT_CONSTANT = _NotConstant()


def parse(text: str, where: str) -> dict[str, object]:
    """Module-level assignments of a version.py: constants, or `NOT_CONSTANT`.

    `where` names the file in the error for a file that does not parse.
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc) or type(exc).__name__
        line = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise VersionPyError(f"{where!r}: version.py does not parse: {detail}{line}") from exc
    values: dict[str, object] = {}
    for node in tree.body:
        target, value = _assignment(node)
        if isinstance(target, ast.Name) and value is not None:
            values[target.id] = value.value if isinstance(value, ast.Constant) else NOT_CONSTANT
    return values


def _assignment(node: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return node.targets[0], node.value
    if isinstance(node, ast.AnnAssign):
        return node.target, node.value
    return None, None


def runtime_version(value: object, key: str, where: str) -> str | None:
    """version.py's `cuda` or `hip`: None for none (None, ''), else a version string.

    torch writes strings ('12.8'); a number is taken as the version it spells (`cuda = 12` is
    CUDA 12, `12.8` is 12.8). Anything else is refused, never read as CPU-only.
    """
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        value = str(value)
    elif isinstance(value, float):
        value = repr(value)
    pattern = CUDA_VERSION if key == "cuda" else HIP_VERSION
    if isinstance(value, str) and pattern.fullmatch(value):
        return value
    if value is NOT_CONSTANT:
        raise VersionPyError(f"{where!r}: {key} is an expression, not a version string")
    shown = value[:40] if isinstance(value, str) else value
    raise VersionPyError(f"{where!r}: {key} {shown!r} is not a version (e.g. '12.8')")
