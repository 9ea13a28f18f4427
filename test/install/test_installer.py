"""torchstack.install.wheels: the uv command line, and one real install of a tiny wheel with it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.wheelbuild import build_wheel

from torchstack.errors import TorchstackError
from torchstack.install.wheels import (
    CACHE_DIR,
    SHARED_CACHE_ENV,
    WHEELS_BY_CONTENT,
    InstallerError,
    by_content,
    cache_dir,
    compile_command,
    install_command,
    leftovers,
    start_removal,
    uv_binary,
)

PYTHON_DIR = f"python{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture(autouse=True, scope="module")
def _own_cache() -> Iterator[None]:
    """The default, each install its own cache, whatever the environment of the tests says."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(SHARED_CACHE_ENV, raising=False)
        yield


def option_value(command: list[str], option: str) -> str:
    """The argument that follows `option`, which must appear exactly once."""
    assert command.count(option) == 1, command
    return command[command.index(option) + 1]


class TestUvBinary:
    def test_is_an_executable(self) -> None:
        found = uv_binary()
        assert os.path.isfile(found)
        assert os.access(found, os.X_OK)

    def test_falls_back_to_path(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        fake = tmp_path / "uv"
        fake.write_text("#!/bin/sh\n")
        fake.chmod(0o755)
        monkeypatch.setitem(sys.modules, "uv", None)  # the uv package cannot be imported
        monkeypatch.setenv("PATH", str(tmp_path))
        assert uv_binary() == str(fake)

    def test_raises_without_any_uv(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setitem(sys.modules, "uv", None)
        monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder
        with pytest.raises(InstallerError, match=r"uv is not installed: pip install uv"):
            uv_binary()


class TestCacheDir:
    @pytest.mark.parametrize(
        "prefix",
        [
            # an EasyBuild installdir
            "/apps/software/PyTorch/2.13.0",
            # with a trailing slash
            "/apps/software/PyTorch/2.13.0/",
            # relative
            "prefix",
        ],
        ids=["absolute", "trailing-slash", "relative"],
    )
    def test_inside_the_prefix(self, prefix: str) -> None:
        found = cache_dir(prefix)
        assert os.path.basename(found) == CACHE_DIR
        assert os.path.dirname(found) == prefix.rstrip("/")


class TestInstallCommand:
    def test_runs_uv_pip_install(self) -> None:
        command = install_command("/usr/bin/python3", "/p", ["/w/a-1.0-py3-none-any.whl"])
        assert command[:3] == [uv_binary(), "pip", "install"]

    @pytest.mark.parametrize(
        "flag",
        [
            # the easyconfig lists every wheel; uv must not resolve more
            "--no-deps",
            # a build host has no network, and must not silently use it
            "--offline",
            # no user or site uv.toml changes the install
            "--no-config",
        ],
        ids=["no-deps", "offline", "no-config"],
    )
    def test_flag(self, flag: str) -> None:
        command = install_command("/usr/bin/python3", "/p", ["/w/a-1.0-py3-none-any.whl"])
        assert command.count(flag) == 1

    @pytest.mark.parametrize(
        ("option", "expected"),
        [
            # the interpreter the prefix is for
            ("--python", "/opt/Python/3.11/bin/python"),
            # the install prefix itself, not a site-packages folder
            ("--prefix", "/apps/PyTorch"),
            # a cache on the prefix's file system
            ("--cache-dir", os.path.join("/apps/PyTorch", CACHE_DIR)),
            # so that torch's files are written once
            ("--link-mode", "hardlink"),
        ],
        ids=["python", "prefix", "cache-dir", "link-mode"],
    )
    def test_option(self, option: str, expected: str) -> None:
        command = install_command("/opt/Python/3.11/bin/python", "/apps/PyTorch", ["/w/a.whl"])
        assert option_value(command, option) == expected

    def test_cache_dir_is_inside_the_prefix(self, tmp_path: Path) -> None:
        prefix = tmp_path / "prefix"
        cache = option_value(install_command("python3", str(prefix), ["a.whl"]), "--cache-dir")
        assert Path(cache).parent == prefix

    def test_wheels_absolute_in_order_at_the_end(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.chdir(tmp_path)
        wheels = ["b-1.0-py3-none-any.whl", "sub/a-1.0-py3-none-any.whl", "/abs/c.whl"]
        command = install_command("python3", "/p", wheels)
        assert command[-3:] == [
            str(tmp_path / "b-1.0-py3-none-any.whl"),
            str(tmp_path / "sub" / "a-1.0-py3-none-any.whl"),
            "/abs/c.whl",
        ]

    def test_leaves_byte_compiling_to_compile_command(self) -> None:
        # the easyblock byte-compiles afterwards, beside its checks
        command = install_command("python3", "/p", ["/w/a.whl"])
        assert "--compile-bytecode" not in command
        assert compile_command("python3", "/p/lib/site-packages", 3)[2:4] == ["-j", "3"]

    def test_no_wheels_raises(self) -> None:
        with pytest.raises(InstallerError, match=r"^no wheels to install$") as caught:
            install_command("python3", "/p", [])
        assert isinstance(caught.value, TorchstackError)


@dataclass(frozen=True)
class Installed:
    prefix: Path
    site_packages: Path
    links_before: int  # st_nlink of tinypkg/__init__.py while uv's cache was there
    in_cache: bool  # whether the cache held the very same inode


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """tinypkg installed by the real uv with sys.executable, then byte-compiled; the cache
    removed afterwards, as the easyblock does."""
    root = tmp_path_factory.mktemp("installer")
    files = {"tinypkg/__init__.py": b"VALUE = 42\n", "tinypkg/util.py": b"ONE = 1\n"}
    wheel = build_wheel(root, "tinypkg", "1.0", files)
    prefix = root / "prefix"
    result = subprocess.run(
        install_command(sys.executable, str(prefix), [str(wheel)]),
        capture_output=True, text=True, cwd=root,
    )
    assert result.returncode == 0, result.stderr
    site = prefix / "lib" / PYTHON_DIR / "site-packages"
    module = site / "tinypkg" / "__init__.py"
    cache = Path(cache_dir(str(prefix)))
    inode = module.stat().st_ino
    in_cache = any(p.stat().st_ino == inode for p in cache.rglob("__init__.py"))
    links_before = module.stat().st_nlink
    start_removal(str(prefix)).join()
    compiled = subprocess.run(compile_command(sys.executable, str(site)), capture_output=True,
                              text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return Installed(prefix, site, links_before, in_cache)


class TestRealInstall:
    def test_importable_from_site_packages(self, installed: Installed, tmp_path: Path) -> None:
        result = subprocess.run(
            [sys.executable, "-c", "import tinypkg; print(tinypkg.__file__, tinypkg.VALUE)"],
            env=dict(os.environ, PYTHONPATH=str(installed.site_packages)),
            capture_output=True, text=True, cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        expected = installed.site_packages / "tinypkg" / "__init__.py"
        assert result.stdout.split() == [str(expected), "42"]

    def test_dist_info_has_record_and_installer(self, installed: Installed) -> None:
        dist_info = installed.site_packages / "tinypkg-1.0.dist-info"
        record = (dist_info / "RECORD").read_text()
        assert "tinypkg/__init__.py," in record
        assert "tinypkg-1.0.dist-info/INSTALLER," in record
        assert (dist_info / "INSTALLER").read_text().strip() != ""

    def test_byte_compiled(self, installed: Installed) -> None:
        pycache = installed.site_packages / "tinypkg" / "__pycache__"
        tag = sys.implementation.cache_tag
        assert (pycache / f"__init__.{tag}.pyc").is_file()
        assert (pycache / f"util.{tag}.pyc").is_file()

    def test_hard_linked_from_the_cache(self, installed: Installed) -> None:
        assert installed.in_cache
        assert installed.links_before == 2

    def test_files_survive_removing_the_cache(self, installed: Installed) -> None:
        assert not Path(cache_dir(str(installed.prefix))).exists()
        assert not (installed.prefix / ".lock").exists()
        assert sorted(p.name for p in installed.prefix.parent.iterdir()
                      if p.name.startswith("prefix")) == ["prefix"]
        module = installed.site_packages / "tinypkg" / "__init__.py"
        assert module.read_text() == "VALUE = 42\n"
        assert module.stat().st_nlink == 1
        assert (installed.site_packages / "tinypkg" / "util.py").read_text() == "ONE = 1\n"


class TestSharedCache:
    """$TORCHSTACK_UV_CACHE: one cache kept across installs, which hard-link from it."""

    def test_cache_dir_is_the_shared_one(self, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv(SHARED_CACHE_ENV, "uv-cache")  # relative: made absolute
        assert cache_dir("/apps/PyTorch") == str(tmp_path / "uv-cache")
        wheel = build_wheel(tmp_path, "onepkg", "1.0", {"onepkg/__init__.py": b""})
        command = install_command("python3", "/apps/PyTorch", [str(wheel)])
        assert option_value(command, "--cache-dir") == str(tmp_path / "uv-cache")

    def test_only_the_lock_is_left_over(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(SHARED_CACHE_ENV, "/scratch/uv")
        assert leftovers("/apps/PyTorch") == ["/apps/PyTorch/.lock"]

    def test_wheels_named_by_content(self, monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: Path) -> None:
        # uv keys a local wheel by its path: one wheel in two builds' sources, and a link
        wheel = build_wheel(tmp_path, "named", "1.0", {"named/__init__.py": b""})
        other = tmp_path / "sources" / wheel.name
        other.parent.mkdir()
        shutil.copyfile(wheel, other)
        link = tmp_path / "sources" / "link.whl"
        link.symlink_to(wheel)
        assert install_command("python3", "/p", [str(link)])[-1] == str(link)  # no shared cache
        monkeypatch.setenv(SHARED_CACHE_ENV, str(tmp_path / "cache"))
        names = {install_command("python3", "/p", [str(w)])[-1] for w in (wheel, other, link)}
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert names == {str(tmp_path / "cache" / WHEELS_BY_CONTENT / digest / wheel.name)}
        assert Path(names.pop()).stat().st_ino == wheel.stat().st_ino  # the first, linked

    def test_real_path_where_no_link_can_be_made(self, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "unlinked", "1.0", {"unlinked/__init__.py": b""})
        (tmp_path / "cache").write_text("not a folder")
        monkeypatch.setenv(SHARED_CACHE_ENV, str(tmp_path / "cache"))
        assert by_content(str(wheel), str(tmp_path / "cache")) == str(wheel)

    def test_installs_share_the_cached_files(self, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
        cache = tmp_path / "shared"
        monkeypatch.setenv(SHARED_CACHE_ENV, str(cache))
        wheel = build_wheel(tmp_path, "sharedpkg", "1.0", {"sharedpkg/data.bin": os.urandom(512)})
        fetched = tmp_path / "fetched" / wheel.name  # the same wheel fetched by another build
        fetched.parent.mkdir()
        shutil.copyfile(wheel, fetched)
        inodes = []
        for name, source in (("first", wheel), ("second", fetched)):
            prefix = tmp_path / name
            result = subprocess.run(install_command(sys.executable, str(prefix), [str(source)]),
                                    capture_output=True, text=True, cwd=tmp_path)
            assert result.returncode == 0, result.stderr
            start_removal(str(prefix)).join()
            assert not (prefix / ".lock").exists()
            data = prefix / "lib" / PYTHON_DIR / "site-packages" / "sharedpkg" / "data.bin"
            inodes.append(data.stat().st_ino)
        cached = [p.stat().st_ino for p in cache.glob("archive-v0/*/sharedpkg/data.bin")]
        assert cached == inodes[:1] == inodes[1:]  # unpacked once, kept, linked twice
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "fetched", "first", "second", "shared", wheel.name]


class TestCompileAfterwards:
    """install_command, then compile_command, as PyTorchWheels runs them."""

    @pytest.fixture()
    def site_packages(self, tmp_path: Path) -> Path:
        files = {"latepkg/__init__.py": b"VALUE = 1\n", "latepkg/sub/mod.py": b"TWO = 2\n",
                 "latepkg/tests/broken.py": b"def (:\n"}  # as torch ships a few test inputs
        wheel = build_wheel(tmp_path, "latepkg", "1.0", files)
        prefix = tmp_path / "prefix"
        result = subprocess.run(
            install_command(sys.executable, str(prefix), [str(wheel)]),
            capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return prefix / "lib" / PYTHON_DIR / "site-packages"

    def test_uv_wrote_no_bytecode(self, site_packages: Path) -> None:
        assert not list(site_packages.rglob("*.pyc"))

    def test_compiles_everything_but_the_broken_file(self, site_packages: Path) -> None:
        result = subprocess.run(compile_command(sys.executable, str(site_packages)),
                                capture_output=True, text=True)
        # exit 1 and a message for the file that does not compile; the easyblock logs it
        assert result.returncode == 1
        assert "broken.py" in result.stdout + result.stderr
        tag = sys.implementation.cache_tag
        package = site_packages / "latepkg"
        assert (package / "__pycache__" / f"__init__.{tag}.pyc").is_file()
        assert (package / "sub" / "__pycache__" / f"mod.{tag}.pyc").is_file()
        assert not (package / "tests" / "__pycache__" / f"broken.{tag}.pyc").exists()
