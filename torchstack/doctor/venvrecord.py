"""What a torchstack venv records about itself, and how doctor reads it back.

Three files in the venv's root: `torchstack-venv.json` (the modules it was made on, the
module's Python, torch, the pins), `torchstack-constraints.txt` (the pins as pip reads
them) and `pip.conf`, whose `[install] constraint` names the constraints file. pip reads
`$VIRTUAL_ENV/pip.conf` after the global and user files, so it wins over both, but not
over $PIP_CONSTRAINT.
"""

from __future__ import annotations

import configparser
import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchstack._files import MAX_CONFIG, FileKindError, read_text

RECORD = "torchstack-venv.json"
CONSTRAINTS = "torchstack-constraints.txt"
PIP_CONF = "pip.conf"
UV_TOML = "uv.toml"
EXCLUDES = "torchstack-excludes.txt"
SCHEMA = 1


@dataclass(frozen=True)
class VenvRecord:
    """The modules a venv was made on and the distributions it pins (name -> version)."""

    modules: tuple[str, ...]
    python: str
    torch: str
    abi_tag: str | None
    pins: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "modules": list(self.modules), "python": self.python,
                "torch": self.torch, "abi_tag": self.abi_tag, "constraints": CONSTRAINTS,
                "pins": dict(self.pins)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VenvRecord:
        return cls(modules=tuple(str(m) for m in data["modules"]), python=str(data["python"]),
                   torch=str(data["torch"]), abi_tag=data.get("abi_tag"),
                   pins={str(k): str(v) for k, v in dict(data["pins"]).items()})


def read_record(prefix: Path) -> VenvRecord | None:
    """The record of the venv at `prefix`; None when it is not a torchstack venv.

    Raises ValueError when the record exists but cannot be read as one.
    """
    try:
        text = read_text(prefix / RECORD, MAX_CONFIG)
    except FileNotFoundError:
        return None
    except FileKindError as exc:  # a FIFO, a device, too large, not UTF-8
        raise ValueError(str(exc)) from exc
    except OSError as exc:
        raise ValueError(f"cannot read {str(prefix / RECORD)!r}: {exc.strerror}") from exc
    try:
        return VenvRecord.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{str(prefix / RECORD)!r} is not a torchstack venv record: "
                         f"{exc}") from exc


def wired_constraints(prefix: Path) -> list[str]:
    """The constraint files the venv's pip.conf names for `pip install`, in order.

    Raises ValueError naming pip.conf when it is there but cannot be read (a FIFO, which
    would hang pip too, or no UTF-8) or parsed.
    """
    path = prefix / PIP_CONF
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(read_text(path, MAX_CONFIG), str(path))
    except FileNotFoundError:
        return []
    except FileKindError as exc:
        raise ValueError(str(exc)) from exc
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    except configparser.Error as exc:
        raise ValueError(f"{str(path)!r} is not an INI file pip reads: "
                         f"{str(exc).splitlines()[0]}") from exc
    for section in ("install", "global"):  # pip lets [install] win over [global]
        if parser.has_option(section, "constraint"):
            return parser.get(section, "constraint").split()
    return []


def names_file(paths: list[str], target: Path) -> bool:
    """Whether one of `paths` (as pip would open them) is the file `target`."""
    real = os.path.realpath(target)
    return any(os.path.realpath(_local_path(p)) == real for p in paths)


def pip_conf_value(path: Path) -> str:
    """`path` as a value of a pip.conf list option: pip splits such values at whitespace,
    so a path with any is written as a file: URL (percent-encoded), which `-c` also takes."""
    text = str(path)
    if text.split() == [text]:
        return text
    return path.as_uri()


def _local_path(value: str) -> str:
    """A constraint as pip opens it: a file: URL (percent-encoded, which is how a path
    with whitespace is written in pip.conf, where pip splits values at whitespace) or a
    path."""
    if value.startswith("file:"):
        return urllib.request.url2pathname(urllib.parse.urlsplit(value).path)
    return os.path.expanduser(value)
