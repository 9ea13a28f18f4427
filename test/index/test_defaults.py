"""The indexes a run asks: named ones, the defaults, or the catalog's replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchstack.index import catalog, defaults
from torchstack.index.simple import SimpleIndex


class TestLocations:
    def test_defaults_pypi_first(self) -> None:
        found = defaults.locations(None)
        assert found == defaults.DEFAULT_INDEXES
        assert found[0] == "https://pypi.org/simple/"
        assert "https://download.pytorch.org/whl/cu128/" in found

    @pytest.mark.parametrize("named", [
        ["https://b.example/simple/", "https://a.example/simple/"],  # order kept, not sorted
        ["/srv/wheels"],  # a local folder
    ], ids=["two-urls", "folder"])
    def test_named_replace_the_defaults(self, named: list[str]) -> None:
        assert defaults.locations(named) == tuple(named)

    def test_empty_list_means_defaults(self) -> None:
        # argparse leaves an unused `append` option at None; an empty list reads alike
        assert defaults.locations([]) == defaults.DEFAULT_INDEXES


class TestClients:
    def test_online_one_client_per_location(self, tmp_path: Path) -> None:
        indexes = defaults.online([str(tmp_path)])
        assert [type(i) for i in indexes] == [SimpleIndex]
        assert [i.location for i in indexes] == [str(tmp_path)]

    def test_recording_wraps_each_default(self) -> None:
        recorders = defaults.recording(None)
        assert [r.location for r in recorders] == list(defaults.DEFAULT_INDEXES)
        assert all(isinstance(r.index, SimpleIndex) for r in recorders)


class TestOffline:
    def test_shipped_catalog(self) -> None:
        release = catalog.releases()[0]
        indexes, provenance = defaults.offline(release)
        assert [i.location for i in indexes]
        assert len(provenance) == len(indexes)
        assert all(line.startswith("offline: ") for line in provenance)

    def test_release_not_recorded(self, tmp_path: Path) -> None:
        with pytest.raises(catalog.CatalogError, match=r"has no torch '9\.9' \(it has: nothing\)"):
            defaults.offline("9.9", tmp_path)
