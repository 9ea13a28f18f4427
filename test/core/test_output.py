"""output.write_set: a generated set lands whole or not at all, and never clobbers unasked;
the one form of staging names, which readers of module trees and rc-file folders skip."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from torchstack.output import OutputError, staged_name, staging_path, write_set

SET = {"PyTorch-2.9.1-foss-2025a-whl.eb": "name = 'PyTorch'\n",
       "torchvision-0.24.1-foss-2025a-whl.eb": "name = 'torchvision'\n",
       "easystack.yaml": "easyconfigs:\n"}


def _content(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()} if folder.exists() else {}


class TestWriteSet:
    def test_new_folder(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        assert write_set(out, SET) == []
        assert _content(out) == SET
        assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging left behind

    def test_adds_to_existing_folder_keeping_other_files(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        out.mkdir()
        (out / "site-local.eb").write_text("keep me\n")
        (out / "sub").mkdir()
        (out / "sub" / "notes.txt").write_text("nested\n")
        write_set(out, SET)
        assert sorted(p.name for p in out.iterdir()) == sorted([*SET, "site-local.eb", "sub"])
        assert (out / "site-local.eb").read_text() == "keep me\n"
        assert (out / "sub" / "notes.txt").read_text() == "nested\n"
        assert all((out / name).read_text() == text for name, text in SET.items())

    def test_refuses_to_overwrite_without_force(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        out.mkdir()
        (out / "easystack.yaml").write_text("mine\n")
        with pytest.raises(OutputError, match=r"already has easystack.yaml; use --force"):
            write_set(out, SET)
        assert _content(out) == {"easystack.yaml": "mine\n"}  # nothing new written

    def test_force_replaces(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        out.mkdir()
        (out / "easystack.yaml").write_text("mine\n")
        assert write_set(out, SET, force=True) == ["easystack.yaml"]
        assert _content(out) == SET

    @pytest.mark.parametrize("name", ["../escape.eb", "", ".hidden", "a/b.eb"])
    def test_refuses_unsafe_names(self, tmp_path: Path, name: str) -> None:
        with pytest.raises(OutputError, match="not a plain file name"):
            write_set(tmp_path / "out", {name: "x"})
        assert not (tmp_path / "out").exists()

    def test_out_is_a_file(self, tmp_path: Path) -> None:
        (tmp_path / "out").write_text("")
        with pytest.raises(OutputError, match="is not a folder"):
            write_set(tmp_path / "out", SET)


@pytest.mark.parametrize("name", ["PyTorch-2.9.1-foss-2025a-whl.eb", ".modulerc.lua",
                                  "2.9.1.lua", "old.tmp-0123abcd"])
def test_staging_name_names_its_file(tmp_path: Path, name: str) -> None:
    staging = staging_path(tmp_path / name)
    assert staging.parent == tmp_path and staging.name.startswith(".")
    assert staged_name(staging.name) == name
    assert staging_path(tmp_path / name) != staging  # fresh each time


@pytest.mark.parametrize("name", [".modulerc.tmp-0123abc", "modulerc.tmp-0123abcd",
                                  ".modulerc.tmp-0123ABCD", ".modulerc.tmp-notours",
                                  ".out.tmp-0123abcd.old", ".tmp-0123abcd", "2.9.1.lua"])
def test_other_names_are_no_staging_names(name: str) -> None:
    assert staged_name(name) is None


# The writer pauses after its first staged file (a real process, killed with SIGKILL there).
_WRITER = textwrap.dedent("""\
    import pathlib, sys, time
    from torchstack import output
    real = pathlib.Path.write_text
    def slow(self, text, *args, **kwargs):
        result = real(self, text, *args, **kwargs)
        pathlib.Path(sys.argv[2]).touch()
        time.sleep(60)
        return result
    pathlib.Path.write_text = slow
    files = {f"f{i}.eb": f"{i}\\n" for i in range(50)}
    output.write_set(pathlib.Path(sys.argv[1]), files, force=True)
    """)


@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "existing-folder"])
def test_kill_9_while_writing_leaves_old_content(tmp_path: Path, existing: bool) -> None:
    out, started = tmp_path / "out", tmp_path / "started"
    before = {"old.eb": "old\n", "f1.eb": "previous\n"} if existing else {}
    if existing:
        write_set(out, before)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), str(started)])
    deadline = time.monotonic() + 60
    while not started.exists():
        assert writer.poll() is None and time.monotonic() < deadline, "writer never started"
        time.sleep(0.05)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert _content(out) == before  # nothing new, nothing lost
    write_set(out, {"f1.eb": "new\n"}, force=True)  # a leftover staging folder does no harm
    assert (out / "f1.eb").read_text() == "new\n"


def test_kill_9_at_random_points_never_half_writes(tmp_path: Path) -> None:
    """Kill a writer of 400 files at spread-out moments: always old set or complete set."""
    script = textwrap.dedent("""\
        import pathlib, sys
        from torchstack import output
        files = {f"f{i}.eb": f"{sys.argv[2]}\\n" * 2000 for i in range(400)}
        output.write_set(pathlib.Path(sys.argv[1]), files, force=True)
        """)
    out = tmp_path / "out"
    write_set(out, {f"f{i}.eb": "old\n" * 2000 for i in range(400)})
    for attempt, delay in enumerate((0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6)):
        writer = subprocess.Popen([sys.executable, "-c", script, str(out), str(attempt)])
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        texts = {p.read_text() for p in out.iterdir()}
        assert len(list(out.iterdir())) == 400
        assert len(texts) == 1, f"mixed set after kill at {delay}s"
