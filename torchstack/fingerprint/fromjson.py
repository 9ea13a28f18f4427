"""Fingerprints from JSON: validated against the contract on load, refused when they break it.

A fingerprint file comes from `torchstack fingerprint --json`, from an installation's
`easybuild/torchstack-fingerprint.json` or from a person's editor: every field is checked for
its JSON type and its value (PEP 440 versions, a valid specifier, CUDA and ROCm versions,
a known role and link class, guard clauses of compat's grammar), so that a damaged file is an
error, never half of a verdict (docs/design.rst, "Reading it back").
"""

from __future__ import annotations

import json
import os
import re
import reprlib
from collections.abc import Callable
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from torchstack._files import describe_os_error, read_regular
from torchstack.fingerprint import compat
from torchstack.fingerprint._version_py import CUDA_VERSION, HIP_VERSION
from torchstack.fingerprint.read import SCHEMA, Fingerprint, FingerprintError, TorchFacts

# A fingerprint is a few hundred bytes; anything much larger is not one.
MAX_FILE_SIZE = 1024 * 1024

_LOCAL_LABEL = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*", re.IGNORECASE | re.ASCII)

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 60, 60
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = 4


def show(value: object) -> str:
    """repr(value) for a message: short, and safe for values nested a thousand deep."""
    return _SHORT.repr(value)


_OPTIONAL_STR = (str, type(None))
# The JSON types of the fields: a fingerprint that mistypes one is refused, not half used.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "role": (str,), "name": (str,), "version": (str,), "abi_tag": (str,),
    "link": _OPTIONAL_STR, "requires_torch": _OPTIONAL_STR, "cuda_major": (int, type(None)),
    "registers_kernels": (bool, type(None)),
}
_TORCH_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "release": _OPTIONAL_STR, "local": _OPTIONAL_STR, "cxx11_abi": (bool, type(None)),
    "cuda": _OPTIONAL_STR, "hip": _OPTIONAL_STR,
}


def load_fingerprint(path: str | os.PathLike[str]) -> Fingerprint:
    """The fingerprint in a JSON file; a `FingerprintError` naming the file when it is none."""
    name = os.fspath(path)
    try:
        data = read_regular(path, FingerprintError, MAX_FILE_SIZE)
    except OSError as exc:  # a folder, no permission, gone since it was listed
        raise FingerprintError(describe_os_error(name, exc)) from exc
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError as exc:
        raise FingerprintError(f"{name!r} is not a fingerprint JSON file: nested too deeply") \
            from exc
    except ValueError as exc:  # JSON syntax, not UTF-8, an integer of 5000 digits
        raise FingerprintError(f"{name!r} is not a fingerprint JSON file: {exc}") from exc
    try:
        return from_json(value)
    except FingerprintError as exc:
        raise FingerprintError(f"{name!r}: {exc}") from exc


def from_json(data: object) -> Fingerprint:
    """The fingerprint that a JSON value holds; `FingerprintError` when it breaks the contract."""
    if not isinstance(data, dict):
        raise FingerprintError("a fingerprint must be a JSON object")
    schema = data.get("schema")
    if type(schema) is not int or schema != SCHEMA:
        raise FingerprintError(f"fingerprint schema {show(schema)} is not {SCHEMA}")
    mistyped = _mistyped(data, _FIELD_TYPES, "")
    if isinstance(data.get("torch"), dict):
        mistyped += _mistyped(data["torch"], _TORCH_FIELD_TYPES, "torch.")
    libraries = data.get("torch_libraries") or []
    if not isinstance(libraries, list) or not all(isinstance(x, str) for x in libraries):
        mistyped.append(f"torch_libraries {show(libraries)}")
    clauses = data.get("guard_clauses")
    if clauses is not None and (not isinstance(clauses, list)
                                or not all(isinstance(x, str) for x in clauses)):
        mistyped.append(f"guard_clauses {show(clauses)}")
    if mistyped:
        raise FingerprintError(f"fingerprint mistypes a field: {', '.join(mistyped)}")
    try:
        torch = TorchFacts(**data["torch"])
        fingerprint = Fingerprint(
            role=data["role"],
            name=data["name"],
            version=data["version"],
            torch=torch,
            link=data.get("link"),
            requires_torch=data.get("requires_torch"),
            cuda_major=data.get("cuda_major"),
            abi_tag=data["abi_tag"],
            torch_libraries=tuple(libraries),
            registers_kernels=data.get("registers_kernels"),
            guard_clauses=None if clauses is None else tuple(clauses),
        )
    except (KeyError, TypeError) as exc:
        raise FingerprintError(f"fingerprint lacks or mistypes a field: {exc}") from exc
    if fingerprint.role not in ("provider", "consumer"):
        raise FingerprintError(f"fingerprint role {show(fingerprint.role)} is not "
                               "provider/consumer")
    if fingerprint.role == "consumer" and fingerprint.link not in ("cxx", "stable", "python"):
        raise FingerprintError(f"consumer link {show(fingerprint.link)} is not "
                               "cxx/stable/python")
    problems = _invalid_values(fingerprint)
    if problems:
        raise FingerprintError(f"fingerprint has invalid values: {'; '.join(problems)}")
    return fingerprint


def _mistyped(data: dict[str, Any], types: dict[str, tuple[type, ...]], prefix: str) -> list[str]:
    """`prefix+key value` of every present field whose value is not of its type (bool != int)."""
    found = []
    for key, allowed in types.items():
        value = data.get(key)
        wrong = not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
        if key in data and wrong:
            found.append(f"{prefix}{key} {show(value)}")
    return found


def _invalid_values(fp: Fingerprint) -> list[str]:
    """What a well-typed fingerprint says that no torchstack fingerprint can say."""
    torch = fp.torch
    checks: list[tuple[str, object, Callable[[str], bool], str]] = [
        ("name", fp.name, bool, "is empty"),
        ("version", fp.version, _is_version, "is not a PEP 440 version"),
        ("torch.release", torch.release, _is_version, "is not a PEP 440 version"),
        ("torch.local", torch.local, _matches(_LOCAL_LABEL), "is not a local version label"),
        ("torch.cuda", torch.cuda, _matches(CUDA_VERSION), "is not a CUDA version"),
        ("torch.hip", torch.hip, _matches(HIP_VERSION), "is not a ROCm version"),
        ("requires_torch", fp.requires_torch, _is_specifier, "is not a version specifier"),
    ]
    problems = [f"{key} {show(value)} {why}" for key, value, valid, why in checks
                if isinstance(value, str) and not valid(value)]
    problems += [f"guard_clauses has {show(c)}, not a guard clause"
                 for c in fp.guard_clauses or () if not compat.CLAUSE.fullmatch(c)]
    if fp.role == "provider" and fp.guard_clauses is not None:
        problems.append("a provider records no guard_clauses")
    if fp.cuda_major is not None and fp.cuda_major < 0:
        problems.append(f"cuda_major {fp.cuda_major} is negative")
    if fp.role == "provider" and not problems:
        problems += _provider_disagreements(fp)
    return problems


def _provider_disagreements(fp: Fingerprint) -> list[str]:
    """A provider's version is its torch release and local tag: the two must agree."""
    version = Version(fp.version)
    release = fp.torch.release
    if release is None or Version(release) != Version(version.public):
        return [f"version {show(fp.version)} disagrees with torch.release {show(release)}"]
    if (version.local or None) != (fp.torch.local.lower().replace("-", ".").replace("_", ".")
                                   if fp.torch.local else None):
        return [f"version {show(fp.version)} disagrees with torch.local {show(fp.torch.local)}"]
    return []


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda text: pattern.fullmatch(text) is not None


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _is_specifier(text: str) -> bool:
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return False
    return True
