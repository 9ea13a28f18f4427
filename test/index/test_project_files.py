"""Only a project's own files are taken from its index page, as pip's LinkEvaluator takes them:
a wheel whose normalized name is the project's, an sdist whose name up to a '-' is, followed by
a version. Pure cases on `is_of`, then the real local server (test/support/indexserver.py)
answering PEP 691 JSON and PEP 503 HTML pages that list other projects' files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.indexserver import JSON_TYPE, IndexServer
from support.wheelbuild import build_wheel

from torchstack.index.pages import is_of
from torchstack.index.simple import SimpleIndex

TAGS = "cp313-cp313-manylinux_2_28_x86_64"


class TestIsOf:
    @pytest.mark.parametrize(("project", "filename", "expected"), [
        ("torch", f"torch-2.9.1-{TAGS}.whl", True),
        ("torch", f"torch-2.9.1+cpu-{TAGS}.whl", True),  # a local version
        ("torch", f"torch-2.9.1%2Bcpu-{TAGS}.whl", True),  # as a URL quotes it
        ("torch", f"Torch-2.9.1-{TAGS}.whl", True),  # case is not part of a name
        ("torch", f"torch_foo-2.9.1-{TAGS}.whl", False),  # a look-alike
        ("torch-foo", f"torch_foo-2.9.1-{TAGS}.whl", True),  # PEP 503: '_' is '-'
        ("torch", f"torchvision-0.24.1-{TAGS}.whl", False),  # a prefix is no name
        ("torchvision", f"torch-2.9.1-{TAGS}.whl", False),
        ("torch", "torch-2.9.1\"-py3-none-any.whl", False),  # no valid wheel name
        ("torch", "torch-2.9.1.tar.gz", True),
        ("torch", "Torch-2.9.1.zip", True),
        ("torch", "torchvision-0.24.1.tar.gz", False),
        ("torch", "torch-foo-1.0.tar.gz", False),  # "foo-1.0" is no version
        ("torch-foo", "torch-foo-1.0.tar.gz", True),
        ("torch", "torch-2.9.1.txt", False),  # no distribution file
        ("torch", "torch", False),
    ], ids=["wheel", "local-version", "quoted-plus", "case", "look-alike", "underscore",
            "prefix", "reverse-prefix", "invalid-wheel", "sdist", "sdist-zip", "sdist-prefix",
            "sdist-look-alike", "sdist-dashed-name", "not-an-archive", "bare-name"])
    def test_is_of(self, project: str, filename: str, expected: bool) -> None:
        assert is_of(project, filename) is expected


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("wheels")
    return {name: build_wheel(folder, name, version, {f"{name}/__init__.py": b""}, (), TAGS)
            for name, version in (("torch", "2.9.1"), ("torchvision", "0.24.1"),
                                  ("torch_foo", "2.9.1"))}


@pytest.fixture(params=["json", "html"])
def server(request: pytest.FixtureRequest) -> Iterator[IndexServer]:
    with IndexServer() as running:
        running.formats = (request.param,)
        yield running


def listed(server: IndexServer, project: str) -> list[str]:
    index = SimpleIndex(server.index_url, timeout=5.0, deadline=5.0, retries=0)
    return [f.filename for f in index.files(project)]


class TestPages:
    def test_another_projects_wheel_alone(self, server: IndexServer,
                                          wheels: dict[str, Path]) -> None:
        # torch's page lists torchvision's and a look-alike's wheels only: no file of torch
        for name in ("torchvision", "torch_foo"):
            server.add("torch", wheels[name].name, wheels[name].read_bytes())
        assert listed(server, "torch") == []

    def test_own_files_kept_beside_others(self, server: IndexServer,
                                          wheels: dict[str, Path]) -> None:
        data = wheels["torch"].read_bytes()
        server.add("torch", f"Torch-2.9.1-{TAGS}.whl", data)
        server.add("torch", "torch-2.9.1.tar.gz", b"sdist")
        for name in ("torchvision", "torch_foo"):
            server.add("torch", wheels[name].name, wheels[name].read_bytes())
        server.add("torch", "torchvision-0.24.1.tar.gz", b"sdist")
        assert sorted(listed(server, "torch")) == [f"Torch-2.9.1-{TAGS}.whl",
                                                   "torch-2.9.1.tar.gz"]

    def test_look_alike_page(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        # the look-alike's own page keeps its own wheel, not torch's
        server.add("torch-foo", wheels["torch_foo"].name, wheels["torch_foo"].read_bytes())
        server.add("torch-foo", wheels["torch"].name, wheels["torch"].read_bytes())
        assert listed(server, "torch-foo") == [wheels["torch_foo"].name]


class TestNameAndURL:
    """The listed file name and the URL's last part must both be the project's."""

    WHEEL = f"torch-2.9.1-{TAGS}.whl"
    OTHER = f"torchvision-0.24.1-{TAGS}.whl"

    @pytest.fixture
    def plain(self) -> Iterator[IndexServer]:
        with IndexServer() as running:
            yield running

    def test_json(self, plain: IndexServer) -> None:
        files = [{"filename": self.WHEEL, "url": f"/files/{self.OTHER}", "hashes": {}},
                 {"filename": self.WHEEL, "url": f"/files/{self.WHEEL}", "hashes": {}}]
        plain.answer(plain.page_path("torch"), 200, json.dumps(
            {"meta": {"api-version": "1.1"}, "files": files}).encode(), JSON_TYPE)
        index = SimpleIndex(plain.index_url, retries=0)
        assert [f.url for f in index.files("torch")] == [f"{plain.url}/files/{self.WHEEL}"]

    def test_html(self, plain: IndexServer) -> None:
        page = (f'<a href="/files/{self.OTHER}">{self.WHEEL}</a>'
                f'<a href="/files/{self.WHEEL}">{self.OTHER}</a>'
                f'<a href="/files/{self.WHEEL}">{self.WHEEL}</a>'
                f'<a href="/files/{self.WHEEL}">download</a>')
        plain.answer(plain.page_path("torch"), 200, page.encode(), "text/html")
        found = SimpleIndex(plain.index_url, retries=0).files("torch")
        assert [(f.filename, f.url) for f in found] == [
            (self.WHEEL, f"{plain.url}/files/{self.WHEEL}")] * 2


class TestFolder:
    def test_flat_folder(self, tmp_path: Path, wheels: dict[str, Path]) -> None:
        for wheel in wheels.values():
            (tmp_path / wheel.name).write_bytes(wheel.read_bytes())
        (tmp_path / "torch-foo-1.0.tar.gz").write_bytes(b"sdist")
        names = [f.filename for f in SimpleIndex(str(tmp_path)).files("torch")]
        assert names == [wheels["torch"].name]
