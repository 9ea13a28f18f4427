"""Record a fingerprint in an installation and in its module file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from torchstack.fingerprint import Fingerprint, load_fingerprint
from torchstack.guards.protocol import FINGERPRINT_FILE

__all__ = ["FINGERPRINT_FILE", "read_fingerprint", "whatis_line", "write_fingerprint"]


def write_fingerprint(installdir: str | Path, fingerprint: Fingerprint) -> Path:
    """Write <installdir>/FINGERPRINT_FILE atomically."""
    target = Path(installdir) / FINGERPRINT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(fingerprint.to_json(), indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fingerprint-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


def read_fingerprint(installdir: str | Path) -> Fingerprint | None:
    """The fingerprint an installation recorded, None when it has none.

    A recorded file that cannot be read or breaks the contract (not JSON, nested too deeply,
    a FIFO, a field of the wrong type) is a `FingerprintError` naming it, never taken as none.
    """
    path = Path(installdir) / FINGERPRINT_FILE
    if not os.path.lexists(path):
        return None
    return load_fingerprint(path)


def whatis_line(fingerprint: Fingerprint) -> str:
    """The module's whatis text that names the fingerprint."""
    return f"torchstack: {fingerprint.role} {fingerprint.abi_tag}"
