"""Recording a release into the catalog: resolve it against the real indexes as `generate`
does, and keep every answer the resolution looked at (`torchstack catalog refresh`, and the
refresh before the shipped easyconfigs tree is regenerated)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torchstack.generator import plan
from torchstack.index import catalog, defaults


def record(release: str, folder: Path, indexes: Sequence[str] | None,
           toolchains: Sequence[str], robot_paths: Sequence[str] | None = None) -> Path:
    """Resolve `release` for `toolchains` against `indexes` (None: generate's defaults) and
    write what the indexes answered to the catalog `folder`; returns the file written."""
    recorders = defaults.recording(indexes)
    settings = plan.Settings(release=release, toolchains=tuple(toolchains),
                             robot_paths=tuple(robot_paths) if robot_paths else None)
    plan.generate(settings, recorders)
    return catalog.save(release, recorders, folder)
