"""Which indexes a run asks: those named, else PyPI and then the PyTorch variant indexes; or,
offline, the catalog's recorded answers.

The order is the order of preference: resolution takes a variant from the first index that
offers it for the most architectures, so PyPI's default build comes before the variant indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torchstack.index import catalog
from torchstack.index.protocol import Index
from torchstack.index.simple import SimpleIndex

DEFAULT_INDEXES = ("https://pypi.org/simple/",
                   *(f"https://download.pytorch.org/whl/{variant}/"
                     for variant in ("cpu", "cu126", "cu128", "cu130")))


def locations(named: Sequence[str] | None) -> tuple[str, ...]:
    """The index locations to ask: `named` ones in their order, else DEFAULT_INDEXES."""
    return tuple(named or DEFAULT_INDEXES)


def online(named: Sequence[str] | None) -> list[Index]:
    """Simple-index clients for `named` locations, else for the defaults."""
    return [SimpleIndex(location) for location in locations(named)]


def recording(named: Sequence[str] | None) -> list[catalog.RecordingIndex]:
    """Recording clients, for a catalog refresh, of `named` locations, else of the defaults."""
    return [catalog.RecordingIndex(SimpleIndex(location)) for location in locations(named)]


def offline(release: str, folder: Path | None = None) -> tuple[list[Index], list[str]]:
    """The recorded indexes of `release` in the catalog `folder` (None: the shipped one) and
    the lines that say where their answers come from."""
    recorded = catalog.load(release, folder)
    return list(recorded), catalog.describe(recorded)
