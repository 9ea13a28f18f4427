"""The torch consumers a site names, and the prediction of one consumer wheel on an index.

A site names its projects as requirements (`--with xformers`, `--with 'torchao<0.19'`, or a
file of them, one a line, `#` comments). Which release of each runs on a torch release is the
generator's question, answered in one place (torchstack.generator.siteprojects) for both
`generate --with` and `classify`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchstack._files import MAX_LIST, read_text
from torchstack.errors import TorchstackError
from torchstack.index import wheelelf
from torchstack.index.protocol import Index, IndexFile
from torchstack.index.simple import SimpleIndex

log = logging.getLogger(__name__)


class ProjectListError(TorchstackError):
    """A project list entry that is no requirement, or a list file that cannot be read."""


def parse_projects(entries: Sequence[str], files: Sequence[Path] = ()) -> list[Requirement]:
    """The requirements of `--with` entries and `--with-file` files, every bad one at once."""
    lines = [(entry, "--with") for entry in entries]
    problems = []
    for path in files:
        try:
            text = read_text(path, MAX_LIST, ProjectListError)
        except ProjectListError as exc:  # a FIFO, /dev/zero, too large, not UTF-8
            problems.append(str(exc))
            continue
        except OSError as exc:
            problems.append(f"{str(path)!r} cannot be read ({exc})")
            continue
        for number, raw in enumerate(text.splitlines(), 1):
            entry = raw.split("#", 1)[0].strip()
            if entry:
                lines.append((entry, f"{path}:{number}"))
    found: dict[str, Requirement] = {}
    for entry, where in lines:
        try:
            requirement = Requirement(entry)
        except InvalidRequirement as exc:
            detail = str(exc).splitlines()[0] if str(exc) else "no detail"
            problems.append(f"{where}: {entry[:80]!r} is not a requirement ({detail})")
            continue
        key = canonicalize_name(requirement.name)
        if key == "torch" or key in found:
            what = "is torch itself" if key == "torch" else "is listed twice"
            problems.append(f"{where}: {entry[:80]!r} {what}")
            continue
        found[key] = requirement
    if problems:
        raise ProjectListError("; ".join(problems))
    return list(found.values())


def predict(index: Index, file: IndexFile) -> wheelelf.Prediction:
    """The prediction of one wheel: range reads of a remote one, reads of a local one."""
    if urlsplit(file.url).scheme == "file":
        return wheelelf.predict_file(Path(url2pathname(urlsplit(file.url).path)))
    if not isinstance(index, SimpleIndex):
        raise wheelelf.WheelElfError(f"{index.location} cannot read ranges of {file.filename}")
    read, size, tail = index.ranges(file.url)
    return wheelelf.predict(read, size, tail, file.url)
