"""Whether a wheel fits a Python version and a host architecture, by PEP 425 tags.

The rule: docs/design.rst, "Wheel tags".
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from torchstack.errors import TorchstackError


class WheelTagError(TorchstackError):
    """A wheel whose filename does not parse, or whose tags fit neither Python nor host."""


def supported_tags(python_version: tuple[int, int], arch: str) -> frozenset[tags.Tag]:
    """Tags a CPython of `python_version` accepts on a manylinux host of `arch`."""
    platforms = [p for p in tags.platform_tags() if p.endswith(arch)] or [f"linux_{arch}"]
    interpreter = f"cp{python_version[0]}{python_version[1]}"
    return frozenset(
        [
            *tags.cpython_tags(python_version, platforms=platforms),
            *tags.compatible_tags(python_version, interpreter, platforms),
        ]
    )


@functools.cache
def target_tags(python_version: tuple[int, int], arch: str,
                glibc: tuple[int, int]) -> frozenset[tags.Tag]:
    """Tags a CPython of `python_version` accepts on any Linux of `arch` with that glibc.

    Unlike `supported_tags`, this does not ask the running host: a generator on x86_64
    plans aarch64 builds for a cluster whose glibc it is told.
    """
    platforms = [f"manylinux_{glibc[0]}_{minor}_{arch}" for minor in range(glibc[1], 4, -1)]
    legacy = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
    platforms += [f"{name}_{arch}" for version, name in legacy.items() if version <= glibc]
    platforms.append(f"linux_{arch}")
    interpreter = f"cp{python_version[0]}{python_version[1]}"
    return frozenset([
        *tags.cpython_tags(python_version, platforms=platforms),
        *tags.compatible_tags(python_version, interpreter, platforms),
    ])


def misfit(filename: str, python_version: tuple[int, int], arch: str,
           glibc: tuple[int, int] | None = None) -> str | None:
    """Why `filename` cannot be installed for that Python and architecture, or None: on this
    host (`supported_tags`), or with `glibc` on any Linux of `arch` (`target_tags`)."""
    try:
        _, _, _, wheel_tags = parse_wheel_filename(filename.replace("%2B", "+").replace("%2b", "+"))
    except InvalidWheelFilename as exc:
        raise WheelTagError(f"{filename!r} is not a valid wheel filename: {exc}") from exc
    accepted = (supported_tags(python_version, arch) if glibc is None
                else target_tags(python_version, arch, glibc))
    if wheel_tags & accepted:
        return None
    offered = ", ".join(sorted(str(t) for t in wheel_tags))
    on = f" with glibc {glibc[0]}.{glibc[1]}" if glibc is not None else ""
    return (f"{filename} is for {offered}, not for Python "
            f"{python_version[0]}.{python_version[1]} on {arch}{on}")


def misfits(paths: Iterable[str], python_version: tuple[int, int], arch: str) -> list[str]:
    """Why each of the wheels at `paths` that does not fit cannot be installed."""
    found = (misfit(os.path.basename(p), python_version, arch) for p in paths)
    return [reason for reason in found if reason]
