"""The rollout's writes: all or nothing, every folder checked first, safe to run again after a
crash. A read-only folder is a real read-only bind mount, in a mount namespace of its own."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchstack.rollout import _commit
from torchstack.rollout.defaults import Default, write_defaults
from torchstack.rollout.plan import RolloutError

MODULES = (("PyTorch", "2.6.0"), ("fakeops", "1.0"), ("faketoy", "1.0"))
DEFAULTS = [Default(f"{name}/{version}") for name, version in MODULES]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Three module folders, Lua and Tcl, each with an rc file of the site."""
    for name, version in MODULES:
        folder = tmp_path / "modules" / "all" / name
        folder.mkdir(parents=True)
        if name == "faketoy":
            (folder / version).write_text("#%Module\n")
            (folder / ".modulerc").write_text("#%Module\nmodule-alias toy faketoy/1.0\n")
        else:
            (folder / f"{version}.lua").write_text("\n")
            (folder / ".modulerc.lua").write_text(f'hide_version("{name}/0.1")\n')
    return tmp_path


def rc_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted((root / "modules").rglob("*")) if p.is_file()}


class TestReadOnlyFolder:
    def test_nothing_written_and_the_folder_named(self, root: Path) -> None:
        before = rc_files(root)
        folder = root / "modules" / "all" / "faketoy"
        code = ("import sys; from pathlib import Path\n"
                "from torchstack.rollout.defaults import Default, write_defaults\n"
                "from torchstack.errors import TorchstackError\n"
                "try:\n"
                f"    write_defaults(Path({str(root)!r}), [Default('PyTorch/2.6.0'), "
                "Default('fakeops/1.0'), Default('faketoy/1.0')])\n"
                "except TorchstackError as exc:\n"
                "    print(exc); sys.exit(2)\n")
        script = (f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && "
                  f"exec {sys.executable} -c \"$CODE\"")
        run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                              script], env={**os.environ, "CODE": code,
                                            "PYTHONPATH": str(Path.cwd())},
                             capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 2, run.stdout + run.stderr
        assert f"cannot write {str(folder / '.modulerc')!r}: Read-only file system" in run.stdout
        assert "nothing was changed" in run.stdout
        assert rc_files(root) == before


class TestFailureMidway:
    def test_written_files_restored_and_named(self, root: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
        before = rc_files(root)
        real_replace = os.replace
        calls: list[str] = []

        def replace(src: str, dst: str) -> None:
            calls.append(str(dst))
            if len(calls) == 2:  # the second switch fails; the first must come back
                raise OSError(5, "Input/output error")
            real_replace(src, dst)

        monkeypatch.setattr(_commit.os, "replace", replace)
        with pytest.raises(RolloutError, match=r"cannot write .*fakeops/\.modulerc\.lua': "
                           r"Input/output error; restored the files written before it: "
                           r"'.*PyTorch/\.modulerc\.lua'"):
            write_defaults(root, DEFAULTS)
        monkeypatch.undo()
        assert rc_files(root) == before  # and no staging file left behind


class TestAfterACrash:
    def test_stale_staging_files_removed(self, root: Path) -> None:
        """kill -9 between writing and renaming left a Tcl-looking staging file."""
        stale = root / "modules" / "all" / "faketoy" / "..modulerc.tmp-0123abcd"
        stale.write_text("#%Module\nmodule-version faketoy/1.0 default\n")
        site = root / "modules" / "all" / "faketoy" / ".modulerc.tmp-notours"
        site.write_text("#%Module\n")
        written = write_defaults(root, DEFAULTS)
        assert not stale.exists() and site.exists()
        assert len(written) == 3
        again = rc_files(root)
        assert write_defaults(root, DEFAULTS) == written and rc_files(root) == again

    def test_one_rollout_at_a_time(self, root: Path) -> None:
        fd = os.open(root / "modules", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with pytest.raises(RolloutError, match="another `torchstack rollout` is writing"):
                write_defaults(root, DEFAULTS)
        finally:
            os.close(fd)
        assert "default" not in (root / "modules" / "all" / "PyTorch" / ".modulerc.lua"
                                 ).read_text()
