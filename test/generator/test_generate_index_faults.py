"""`torchstack generate` and `torchstack catalog` end to end, against real HTTP indexes on
127.0.0.1 that want credentials, answer 404, a login page or only yanked wheels, and catalog
folders that are missing, empty or mistyped: what is written, what is said, the exit status.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support.indexserver import IndexServer
from support.releasewheels import wheels_fixture  # noqa: F401  (the fixture `wheels`)
from support.wheelbuild import build_wheel

from torchstack.cli import main

SECRET = "t0k%40en"  # percent-quoted in the URL: the password is "t0k@en"
# A password with each character that ends a URL's authority, typed raw or percent-encoded
PASSWORD = "Xq7/Zt9#Kw3?Vb5@Mn1"
PIECES = ("Xq7", "Zt9", "Kw3", "Vb5", "Mn1")
ENCODED = "Xq7%2FZt9%23Kw3%3FVb5%40Mn1"
LOGIN = (b'<!DOCTYPE html><html><head><title>Sign in</title></head><body><form method="post" '
         b'action="/login"><input name="user"><input type="password" name="password">'
         b'</form><a href="/help">Help</a></body></html>')


@pytest.fixture
def cpu(wheels: dict[str, list[Path]]) -> Iterator[IndexServer]:
    with IndexServer(wheels["cpu"]) as server:
        yield server


def generate(tmp_path: Path, *args: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    return main(["generate", "2.9.1", "--toolchain", "foss/2025a", *args,
                 "--out", str(out)]), out


def with_credentials(server: IndexServer) -> str:
    return server.index_url.replace("http://", f"http://user:{SECRET}@")


def written_text(folder: Path) -> str:
    return "".join(path.read_text() for path in sorted(folder.rglob("*")) if path.is_file())


class TestCredentials:
    """Used for every request, written nowhere: not in an easyconfig, easystack or catalog,
    not in the report or an error."""

    @pytest.fixture
    def guarded(self, wheels: dict[str, list[Path]]) -> Iterator[tuple[IndexServer, ...]]:
        with IndexServer(wheels["pypi"]) as pypi, IndexServer(wheels["cpu"]) as cpu:
            for server in (pypi, cpu):
                server.credentials = ("user", "t0k@en")
            yield pypi, cpu

    def test_generate(self, tmp_path: Path, guarded: tuple[IndexServer, ...],
                      capsys: pytest.CaptureFixture[str]) -> None:
        pypi, cpu = guarded
        code, out = generate(tmp_path, "--index", with_credentials(pypi),
                             "--index", with_credentials(cpu))
        said = capsys.readouterr()
        assert code == 0, said.err
        text = written_text(out)
        assert "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb" in {p.name for p in out.iterdir()}
        for secret in ("t0k", "user:", "%40en"):
            assert secret not in text + said.out + said.err
        assert f"'{cpu.url}/files'" in (out / "PyTorch-2.9.1-foss-2025a-whl.eb").read_text()
        assert all(hit.authorization for server in guarded for hit in server.hits)
        assert f"{cpu.index_url}: the credentials of its URL are not written into " \
               "source_urls; EasyBuild needs its own" in said.out

    def test_catalog_refresh_then_offline(self, tmp_path: Path, guarded: tuple[IndexServer, ...],
                                          capsys: pytest.CaptureFixture[str]) -> None:
        pypi, cpu = guarded
        folder = tmp_path / "catalog"
        assert main(["catalog", "refresh", "--release", "2.9.1", "--toolchain", "foss/2025a",
                     "--index", with_credentials(pypi), "--index", with_credentials(cpu),
                     "--dir", str(folder)]) == 0
        recorded = written_text(folder)
        assert "t0k" not in recorded and "user:" not in recorded
        assert json.loads(recorded)["indexes"][1]["location"] == cpu.index_url
        code, out = generate(tmp_path, "--offline", "--catalog", str(folder))
        assert code == 0 and "t0k" not in written_text(out) + capsys.readouterr().out

    def test_refused_credentials_not_echoed(self, tmp_path: Path,
                                            guarded: tuple[IndexServer, ...],
                                            capsys: pytest.CaptureFixture[str]) -> None:
        pypi, _ = guarded
        wrong = pypi.index_url.replace("http://", "http://user:wr0ng@")
        code, out = generate(tmp_path, "--index", wrong)
        err = capsys.readouterr().err
        assert code == 2 and not out.exists()
        assert "answered HTTP 401, 200 expected (credentials needed or refused)" in err
        assert "wr0ng" not in err


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestSpecialCharacters:
    """A password holding '/', '#', '?' and '@', as a user types it and percent-encoded: no
    part of it in the error line or anywhere else the command writes."""

    COMMANDS: ClassVar[dict[str, Callable[[Path, str], list[str]]]] = {
        "generate": lambda tmp, index: ["generate", "2.9.1", "--toolchain", "foss/2025a",
                                        "--index", index, "--out", str(tmp / "out")],
        "classify": lambda tmp, index: ["classify", "2.9.1", "--with", "torchvision",
                                        "--index", index],
        "catalog-refresh": lambda tmp, index: ["catalog", "refresh", "--release", "2.9.1",
                                               "--toolchain", "foss/2025a", "--index", index,
                                               "--dir", str(tmp / "catalog")],
    }

    @pytest.fixture
    def guarded(self, cpu: IndexServer) -> IndexServer:
        cpu.credentials = ("user", PASSWORD)
        return cpu

    @pytest.mark.parametrize("command", COMMANDS)
    @pytest.mark.parametrize("where", ["index", "no-such-host"])
    def test_typed_raw(self, tmp_path: Path, guarded: IndexServer, command: str, where: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
        url = guarded.index_url if where == "index" else "https://nohost.invalid/simple/"
        argv = self.COMMANDS[command](tmp_path, url.replace("://", f"://user:{PASSWORD}@"))
        assert main(["-v", *argv]) == 2
        said = capsys.readouterr()
        line = said.err.splitlines()[-1]
        assert line.startswith("torchstack: error: '") and "an '@' after the host part" in line
        assert not any(piece in said.out + said.err for piece in PIECES)
        assert guarded.hits == [] and not list(tmp_path.iterdir())

    @pytest.mark.parametrize("command", COMMANDS)
    @pytest.mark.parametrize("where", ["refused", "closed-port", "no-such-host"])
    def test_encoded(self, tmp_path: Path, guarded: IndexServer, command: str, where: str,
                     capsys: pytest.CaptureFixture[str]) -> None:
        if where == "refused":
            guarded.credentials = ("user", "another")
        url = {"closed-port": f"http://127.0.0.1:{closed_port()}/simple/",
               "no-such-host": "https://nohost.invalid/simple/"}.get(where, guarded.index_url)
        argv = self.COMMANDS[command](tmp_path, url.replace("://", f"://user:{ENCODED}@"))
        assert main(["-v", *argv]) == 2
        said = capsys.readouterr()
        assert said.err.splitlines()[-1].startswith("torchstack: error: ")
        assert not any(piece in said.out + said.err for piece in (*PIECES, "user:"))

    def test_encoded_used(self, tmp_path: Path, guarded: IndexServer,
                          capsys: pytest.CaptureFixture[str]) -> None:
        code, out = generate(tmp_path, "-v", "--index",
                             guarded.index_url.replace("://", f"://user:{ENCODED}@"))
        said = capsys.readouterr()
        assert code == 0, said.err
        assert all(hit.authorization for hit in guarded.hits)
        assert not any(piece in written_text(out) + said.out + said.err for piece in PIECES)


class TestAnotherProjectsFiles:
    """A project's page that lists only another project's wheel offers no release of it, as
    pip reads such a page: nothing is written under the project's name."""

    @pytest.fixture
    def mislisted(self, cpu: IndexServer, tmp_path: Path) -> IndexServer:
        other = build_wheel(tmp_path, "torchother", "1.0",
                            {"torchother/__init__.py": b""}, ("torch>=2",))
        cpu.add("torchpure", other.name, other.read_bytes())
        return cpu

    def test_generate_with(self, tmp_path: Path, mislisted: IndexServer,
                           capsys: pytest.CaptureFixture[str]) -> None:
        code, out = generate(tmp_path, "--index", mislisted.index_url, "--with", "torchpure")
        said = capsys.readouterr()
        assert code == 0, said.err
        assert "left out: torchpure: not built" in said.out
        assert not list(out.glob("torchpure*")) and "torchother" not in written_text(out)

    def test_classify(self, mislisted: IndexServer, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["classify", "2.9.1", "--with", "torchpure", "--index", mislisted.index_url,
                     "--python", "3.13", "--arch", "x86_64"]) == 1
        said = capsys.readouterr()
        assert said.out.startswith("torchpure: not built: no release")
        assert "torchother" not in said.out + said.err


class TestWhatHappened:
    """An index's answer is reported as what it was, not as "no wheel"."""

    def test_404_for_torch(self, tmp_path: Path, wheels: dict[str, list[Path]],
                           capsys: pytest.CaptureFixture[str]) -> None:
        with IndexServer([w for w in wheels["cpu"] if not w.name.startswith("torch-")]) as bare:
            code, out = generate(tmp_path, "--index", bare.index_url)
        err = capsys.readouterr().err
        assert code == 2 and not out.exists()
        assert f"torch 2.9.1: {bare.index_url}torch/ answered HTTP 404 for torch" in err
        assert "no wheel" not in err

    def test_404_for_a_companion(self, tmp_path: Path, wheels: dict[str, list[Path]],
                                 capsys: pytest.CaptureFixture[str]) -> None:
        kept = [w for w in wheels["cpu"] if not w.name.startswith("torchaudio-")]
        with IndexServer(kept) as index:
            code, _ = generate(tmp_path, "--index", index.index_url)
        assert code == 0
        assert f"torchaudio: not built: {index.index_url}torchaudio/ answered HTTP 404 for " \
               "torchaudio" in capsys.readouterr().out

    @pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "text/html"])
    def test_login_page(self, tmp_path: Path, cpu: IndexServer, content_type: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
        cpu.answer(cpu.page_path("torch"), 200, LOGIN, content_type)
        code, out = generate(tmp_path, "--index", cpu.index_url)
        err = capsys.readouterr().err
        assert code == 2 and not out.exists()
        assert f"{cpu.index_url}torch/ answered a page that is not a simple index (it asks " \
               "for a password: a login page?)" in err
        assert len(cpu.hits_of(cpu.page_path("torch"))) == 1  # not retried

    def test_login_page_of_one_index_of_two(self, tmp_path: Path, cpu: IndexServer,
                                            wheels: dict[str, list[Path]],
                                            capsys: pytest.CaptureFixture[str]) -> None:
        with IndexServer(wheels["pypi"]) as portal:
            portal.answer(portal.page_path("torch"), 200, LOGIN, "text/html")
            code, out = generate(tmp_path, "--index", portal.index_url, "--index", cpu.index_url)
        said = capsys.readouterr()
        assert code == 1 and (out / "PyTorch-2.9.1-foss-2025a-whl.eb").is_file()
        assert f"index {portal.index_url} did not answer: {portal.index_url}torch/ answered a " \
               "page that is not a simple index" in said.err

    @pytest.mark.parametrize(("yank", "reason", "said"), [
        ("torch-", "broken build", "torch 2.9.1: every wheel for Python 3.13 is yanked "
                                   "(reason: 'broken build')"),
        ("torch-", True, "torch 2.9.1: every wheel for Python 3.13 is yanked "
                         "(no reason given)"),
    ], ids=["with-reason", "no-reason"])
    def test_every_torch_wheel_yanked(self, tmp_path: Path, wheels: dict[str, list[Path]],
                                      yank: str, reason: str | bool, said: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
        with IndexServer() as index:
            for wheel in wheels["cpu"]:
                index.add_wheel(wheel, yanked=reason if wheel.name.startswith(yank) else False)
            code, out = generate(tmp_path, "--index", index.index_url)
        err = capsys.readouterr().err
        assert code == 2 and not out.exists()
        assert said in err and "no wheel" not in err

    def test_one_architecture_yanked(self, tmp_path: Path, wheels: dict[str, list[Path]],
                                     capsys: pytest.CaptureFixture[str]) -> None:
        with IndexServer() as index:
            for wheel in wheels["cpu"]:
                yank = wheel.name.startswith("torch-") and "aarch64" in wheel.name
                index.add_wheel(wheel, yanked="bad aarch64 build" if yank else False)
            code, out = generate(tmp_path, "--index", index.index_url)
        assert code == 0
        assert "torch 2.9.1: every wheel for Python 3.13 on aarch64 is yanked (reason: 'bad " \
               "aarch64 build')" in capsys.readouterr().out
        assert "aarch64" not in (out / "PyTorch-2.9.1-foss-2025a-whl.eb").read_text()


class TestCatalogFolders:
    @pytest.mark.parametrize("action", ["list", "refresh"])
    def test_missing_folder(self, tmp_path: Path, action: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
        missing = tmp_path / "nonexistent"
        assert main(["catalog", action, "--dir", str(missing)]) == 2
        said = capsys.readouterr()
        assert said.out == "" and str(missing) in said.err and said.err.count("\n") == 1

    def test_a_file_is_not_a_folder(self, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_path / "file").write_text("")
        assert main(["catalog", "list", "--dir", str(tmp_path / "file")]) == 2
        assert "is not a folder" in capsys.readouterr().err

    def test_empty_folder(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["catalog", "list", "--dir", str(tmp_path)]) == 0
        assert capsys.readouterr().out == f"the catalog folder {tmp_path} holds no release\n"
        assert main(["catalog", "refresh", "--dir", str(tmp_path)]) == 2
        assert "holds no release to refresh; name releases with --release" in \
               capsys.readouterr().err

    @pytest.mark.parametrize("command", [
        ["catalog", "list", "--dir", "{dir}"],
        ["generate", "2.9.1", "--offline", "--catalog", "{dir}", "--out", "{dir}/out"],
    ], ids=["list", "generate-offline"])
    @pytest.mark.parametrize("document", [
        {"schema": 1, "indexes": [{"location": "https://x/simple/", "recorded": 20260102,
                                   "projects": {}, "metadata": {}}]},
        {"schema": 1, "indexes": [{"location": "https://x/simple/", "recorded": "2026-01-02",
                                   "projects": {"torch": [{"filename": 1}]}, "metadata": {}}]},
        "[" * 50_000 + "]" * 50_000,
    ], ids=["recorded-int", "entry", "nested"])
    def test_damaged_catalog_one_line(self, tmp_path: Path, command: list[str],
                                      document: object,
                                      capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "torch-2.9.1.json"
        path.write_text(document if isinstance(document, str) else json.dumps(document))
        assert main([arg.format(dir=tmp_path) for arg in command]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"torchstack: error: {path}: ") and err.count("\n") == 1
