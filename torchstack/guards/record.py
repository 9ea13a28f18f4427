"""Record a fingerprint in an installation and in its module file.

See docs/design.rst, "Where it is recorded".
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from torchstack.fingerprint import compat
from torchstack.fingerprint.fromjson import load_fingerprint
from torchstack.fingerprint.read import Fingerprint, installation_fingerprints, strongest
from torchstack.guards.protocol import FINGERPRINT_FILE
from torchstack.output import replace_file

__all__ = ["FINGERPRINT_FILE", "Source", "fingerprint_of", "read_fingerprint", "whatis_line",
           "write_fingerprint"]

Source = Literal["recorded", "scanned"]
RecordReader = Callable[[Path], "Fingerprint | None"]
FilesReader = Callable[[Path], "tuple[Fingerprint | None, list[Fingerprint]]"]


def write_fingerprint(installdir: str | Path, fingerprint: Fingerprint) -> Path:
    """Write <installdir>/FINGERPRINT_FILE atomically (a new file 0644, an existing one keeps
    its mode); `OutputError` names the file when it cannot be written."""
    target = Path(installdir) / FINGERPRINT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    data = compat.recorded(fingerprint).to_json()  # a consumer with its guard clauses
    replace_file(target, json.dumps(data, indent=2) + "\n")
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


def fingerprint_of(
    installdir: str | Path,
    *,
    provider_only: bool = False,
    read_record: RecordReader = read_fingerprint,
    read_files: FilesReader = installation_fingerprints,
) -> tuple[Fingerprint | None, Source | None]:
    """The fingerprint an installation recorded, else the one read from its files, else None.

    Read from its files: its torch, else its most strongly linked consumer, as the easyblocks
    record it; with `provider_only` only a torch counts, recorded or read. `read_record`
    (`read_fingerprint` by default) and `read_files` (`installation_fingerprints`) let a
    caller decide what an unreadable record or installation means.
    """
    root = Path(installdir)
    recorded = read_record(root)
    if recorded is not None and (recorded.role == "provider" or not provider_only):
        return recorded, "recorded"
    provider, consumers = read_files(root)
    found = provider if provider_only else provider or strongest(consumers)
    return found, ("scanned" if found is not None else None)


def whatis_line(fingerprint: Fingerprint) -> str:
    """The module's whatis text that names the fingerprint."""
    return f"torchstack: {fingerprint.role} {fingerprint.abi_tag}"
