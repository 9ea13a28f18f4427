"""Lmod's order of module versions: the highest one is a folder's default when none is marked
(docs/design.rst, "How Lmod resolves a load").

A port of Lmod's `parseVersion` (parseVersion.lua, 8.6): numbers padded to nine digits so that
they compare as text, words lower-cased after a `*`, `-` and `p` patch marks as `*zfinal-`,
`pre`/`rc` as candidates (`*c`), `dev` before everything (`*@`), trailing zeros dropped, and
`*zfinal` at the end. So `2.10.0` is above `2.9.1`, `2.9.1` above `2.9.1-foss-2025a` (a word
sorts before the end) and `2.10.0-rc1` above `2.9.1`, as Lmod picks them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_ZERO = "000000000"
_PATCH = "*zfinal-"
_END = "*zfinal"
_REPLACE = {"pre": "c", "preview": "c", "-": "zfinal-", "-p": "zfinal-", "p": "zfinal-",
            "rc": "c", "dev": "@"}
_TOKEN = re.compile(r"(?P<number>[0-9]+)|(?P<slash>/)|(?P<word>[a-z]+)|(?P<patch>-p)|(?P<other>.)",
                    re.S)


def parse_version(version: str) -> str:
    """Lmod's comparable form of a version string (`parseVersion`)."""
    parts: list[str] = []
    for part in _parts(version.lower()):
        if part.startswith("*"):
            if part != _END:
                _drop_trailing(parts, _PATCH)
            _drop_trailing(parts, _ZERO)
            if part == _END:
                _drop_trailing(parts, _PATCH)
        parts.append(part)
    return ".".join(parts).replace("./.", "/")


def weight(version: str, *, marked: bool = False) -> str:
    """What Lmod compares to pick a default: a marked default's first character is `^`,
    above every number and word."""
    parsed = parse_version(version)
    return "^" + parsed[1:] if marked else parsed


def _parts(text: str) -> Iterator[str]:
    """Lmod's `parseVersionParts`: a leading `.` is a zero, other dots only separate."""
    position = 0
    while True:
        if position < len(text) and text[position] == ".":
            position += 1
            if position == 1:
                yield _ZERO
                continue
        if position >= len(text):
            yield _END
            return
        match = _TOKEN.match(text, position)
        assert match is not None  # `other` matches any one character
        position = match.end()
        yield _token(match)


def _token(match: re.Match[str]) -> str:
    if match.group("number") is not None:
        return f"{int(match.group('number')):09d}"
    if match.group("slash") is not None:
        return "/"
    if match.group("patch") is not None:
        return _PATCH
    text = match.group(0)
    return "*" + _REPLACE.get(text, text)


def _drop_trailing(parts: list[str], value: str) -> None:
    while parts and parts[-1] == value:
        parts.pop()
