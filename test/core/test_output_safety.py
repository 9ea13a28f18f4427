"""output.write_set keeps what a site owns: symlinks, mode, group, setgid, the caller's folder,
mounts, and a set written by another writer; its errors name the folder the caller gave.

Real folders in temporary directories; hypothesis varies modes, groups and symlink chains.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchstack import output
from torchstack.output import OutputError, write_set

SET = {"PyTorch-2.9.1-foss-2025a-whl.eb": "name = 'PyTorch'\n",
       "easystack.yaml": "easyconfigs:\n"}
ROOT = os.geteuid() == 0
# Groups this process may give a folder: any as root, else its own.
GROUPS = [0, 4242, 65001] if ROOT else sorted(set(os.getgroups()))
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def content(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}


def leftovers(root: Path) -> list[str]:
    """Staging folders and lock files anywhere under `root`."""
    return [str(p) for p in root.rglob(".*") if ".tmp-" in p.name or p.name.endswith(".lock")]


@contextlib.contextmanager
def fresh(factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new folder for one hypothesis example."""
    path = factory.mktemp("case")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class TestSymlinkedOut:
    """A symlink (or a chain of them) as the folder or a parent: the swap happens at the end
    of the chain and every link stays as it was."""

    @PROPERTY
    @given(relative=st.lists(st.booleans(), min_size=1, max_size=4), existing=st.booleans(),
           as_parent=st.booleans())
    def test_chain(self, tmp_path_factory: pytest.TempPathFactory, relative: list[bool],
                   existing: bool, as_parent: bool) -> None:
        with fresh(tmp_path_factory) as root:
            real = root / "site" / "out"
            real.parent.mkdir()
            if existing:
                real.mkdir()
                (real / "local.eb").write_text("keep\n")
            destination, links = (real.parent if as_parent else real), []
            for i, rel in reversed(list(enumerate(relative))):
                link = root / f"link{i}"
                text = os.path.relpath(destination, root) if rel else str(destination)
                link.symlink_to(text)
                links.append((link, text))
                destination = link
            out = root / "link0" / "out" if as_parent else root / "link0"
            if as_parent or existing:
                write_set(out, SET)
                assert content(real) == {**SET, **({"local.eb": "keep\n"} if existing else {})}
            else:
                with pytest.raises(OutputError, match=r"is a symlink to .*, which does not exist"):
                    write_set(out, SET)
                assert not real.exists()
            assert all(link.is_symlink() and os.readlink(link) == text for link, text in links)
            assert leftovers(root) == []

    def test_loop(self, tmp_path: Path) -> None:
        (tmp_path / "a").symlink_to("b")
        (tmp_path / "b").symlink_to("a")
        for out in (tmp_path / "a", tmp_path / "a" / "out"):
            with pytest.raises(OutputError, match="symlink loop"):
                write_set(out, SET)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]

    def test_dangling_parent_is_not_made(self, tmp_path: Path) -> None:
        (tmp_path / "scratch").symlink_to(tmp_path / "unmounted" / "scratch")
        with pytest.raises(OutputError, match=str(tmp_path / "scratch")):
            write_set(tmp_path / "scratch" / "out", SET)
        assert not (tmp_path / "unmounted").exists()


def _modes() -> st.SearchStrategy[int]:
    return st.integers(0, 0o7777) if ROOT else st.integers(0, 0o7777).map(lambda m: m | 0o700)


class TestFolderAttributes:
    """The new folder looks as if the set had been written into the old one."""

    @PROPERTY
    @given(mode=_modes(), gid=st.sampled_from(GROUPS), sub_mode=_modes(),
           sub_gid=st.sampled_from(GROUPS), sub_uid=st.sampled_from([0, 4243] if ROOT else [-1]))
    def test_existing_folder(self, tmp_path_factory: pytest.TempPathFactory, mode: int,
                             gid: int, sub_mode: int, sub_gid: int, sub_uid: int) -> None:
        with fresh(tmp_path_factory) as root:
            out = root / "out"
            (out / "sub").mkdir(parents=True)
            (out / "sub" / "notes.txt").write_text("nested\n")
            os.chown(out / "sub", sub_uid, sub_gid)
            os.chmod(out / "sub", sub_mode)
            os.chown(out, -1, gid)
            os.chmod(out, mode)
            before, sub_before = os.stat(out), os.stat(out / "sub")
            write_set(out, SET)
            after, sub_after = os.stat(out), os.stat(out / "sub")
            assert stat.S_IMODE(after.st_mode) == mode
            assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
            assert stat.S_IMODE(sub_after.st_mode) == sub_mode
            assert (sub_after.st_uid, sub_after.st_gid) == (sub_before.st_uid, sub_before.st_gid)
            expected_gid = gid if mode & stat.S_ISGID else os.getegid()
            assert {os.stat(out / name).st_gid for name in SET} == {expected_gid}
            assert (out / "sub" / "notes.txt").read_text() == "nested\n"

    @PROPERTY
    @given(parent_mode=st.sampled_from([0o755, 0o2775, 0o2770, 0o3777]),
           gid=st.sampled_from(GROUPS), umask=st.sampled_from([0o022, 0o002, 0o077]))
    def test_new_folder_as_mkdir_makes_it(self, tmp_path_factory: pytest.TempPathFactory,
                                          parent_mode: int, gid: int, umask: int) -> None:
        with fresh(tmp_path_factory) as root:
            parent = root / "shared"
            parent.mkdir()
            os.chown(parent, -1, gid)
            os.chmod(parent, parent_mode)
            (parent / "by-mkdir").mkdir()  # what the site gets from mkdir, under this umask
            previous = os.umask(umask)
            try:
                (parent / "by-mkdir-umask").mkdir()
                write_set(parent / "out", SET)
            finally:
                os.umask(previous)
            reference, made = os.stat(parent / "by-mkdir-umask"), os.stat(parent / "out")
            assert stat.S_IMODE(made.st_mode) == stat.S_IMODE(reference.st_mode)
            assert made.st_gid == reference.st_gid
            setgid = parent_mode & stat.S_ISGID
            assert {os.stat(parent / "out" / n).st_gid for n in SET} == \
                {gid if setgid else os.getegid()}

    def test_extended_attributes_kept(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        out.mkdir()
        try:
            os.setxattr(out, "user.site", b"group-shared")
        except OSError as exc:
            pytest.skip(f"no user xattrs here: {exc}")
        write_set(out, SET)
        assert os.getxattr(out, "user.site") == b"group-shared"

    def test_default_acl_kept(self, tmp_path: Path) -> None:
        assert shutil.which("setfacl"), "setfacl is not installed: run scripts/setup (acl)"
        out = tmp_path / "out"
        out.mkdir()
        acl = subprocess.run(["setfacl", "-m", "d:g:4242:rwx,g:4242:rwx", str(out)],
                             capture_output=True, text=True)
        if acl.returncode != 0:
            pytest.skip(f"no ACLs here: {acl.stderr.strip()}")
        before = subprocess.run(["getfacl", "-cp", str(out)], capture_output=True, text=True)
        write_set(out, SET)
        after = subprocess.run(["getfacl", "-cp", str(out)], capture_output=True, text=True)
        assert after.stdout == before.stdout


@contextlib.contextmanager
def nothing_made_in(*parents: Path) -> Iterator[None]:
    """Fail at once (before any harm) when anything is made or renamed inside `parents`."""
    guarded = {str(p) for p in parents}
    real_mkdir, real_rename, real_link = os.mkdir, os.rename, os.link

    def check(path: object) -> None:
        if os.path.dirname(os.path.abspath(os.fsdecode(path))) in guarded:  # type: ignore[arg-type]
            raise AssertionError(f"write_set made {path} in a guarded folder")

    def mkdir(path: object, *args: object, **kwargs: object) -> None:
        if os.path.isdir(os.fsdecode(path)):  # type: ignore[arg-type]
            raise FileExistsError(errno.EEXIST, "File exists", path)
        check(path)
        real_mkdir(path, *args, **kwargs)  # type: ignore[arg-type]

    def rename(src: object, dst: object, *args: object, **kwargs: object) -> None:
        check(dst)
        real_rename(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    patch = pytest.MonkeyPatch()
    patch.setattr(os, "mkdir", mkdir)
    patch.setattr(os, "rename", rename)
    patch.setattr(os, "link", lambda *a, **k: (check(a[1]), real_link(*a, **k)))
    patch.setattr(output, "_exchange", lambda *a: (_ for _ in ()).throw(AssertionError("swap")))
    try:
        yield
    finally:
        patch.undo()


class TestUnsafeFolders:
    """A folder the caller stands in, a home, `/` or a mount point is never swapped."""

    @PROPERTY
    @given(depth=st.integers(0, 3), spelling=st.sampled_from(["relative", "absolute", "link"]))
    def test_current_folder_and_its_ancestors(self, tmp_path_factory: pytest.TempPathFactory,
                                              depth: int, spelling: str) -> None:
        with fresh(tmp_path_factory) as root:
            here = root / "a" / "b" / "c"
            here.mkdir(parents=True)
            (here / "work.txt").write_text("mine\n")
            (root / "link").symlink_to(here.parents[depth - 1] if depth else here)
            chain = [here, *here.parents][:depth + 1]
            before = [os.stat(p).st_ino for p in chain]
            with contextlib.chdir(here):
                out = {"relative": Path("/".join([".."] * depth) or "."),
                       "absolute": chain[-1], "link": root / "link"}[spelling]
                word = "the current folder" if depth == 0 else "an ancestor of the current"
                with pytest.raises(OutputError, match=word):
                    write_set(out, SET)
                assert os.getcwd() == str(here)
            assert [os.stat(p).st_ino for p in chain] == before
            assert content(here) == {"work.txt": "mine\n"}
            assert leftovers(root) == []

    @pytest.mark.parametrize("level", [0, 1])
    def test_home_and_its_ancestors(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    level: int) -> None:
        home = tmp_path / "users" / "me"
        home.mkdir(parents=True)
        monkeypatch.setenv("HOME", str(home))
        out = home if level == 0 else home.parent
        with nothing_made_in(out.parent), pytest.raises(OutputError, match="home folder"):
            write_set(out, SET)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["users"]

    def test_root(self) -> None:
        with nothing_made_in(Path("/")), pytest.raises(OutputError, match="the root folder"):
            write_set(Path("/"), SET)

    def test_mount_point(self) -> None:
        mount = next((Path(p) for p in ("/proc", "/sys", "/dev") if os.path.ismount(p)), None)
        if mount is None:
            pytest.skip("no mount point to try")
        with nothing_made_in(mount.parent), pytest.raises(OutputError, match="a mount point"):
            write_set(mount, SET)


_MOUNTED = textwrap.dedent("""\
    set -e
    mount -t tmpfs none "$1/out/scratch"
    echo data > "$1/out/scratch/results.txt"
    "$2" -c 'import pathlib, sys
    from torchstack.output import OutputError, write_set
    try:
        write_set(pathlib.Path(sys.argv[1]) / "out", {"a.eb": "x"})
    except OutputError as exc:
        print(exc)
    ' "$1"
    if grep -q " $1/out/scratch tmpfs " /proc/self/mounts; then echo mounted; fi
    cat "$1/out/scratch/results.txt"
    """)


def test_mount_inside_folder_is_refused_and_its_files_stay(tmp_path: Path) -> None:
    """Removing the old folder after a swap would empty a file system mounted inside it.
    Runs in a private mount namespace (`unshare -m`): the mount is gone when it ends."""
    (tmp_path / "out" / "scratch").mkdir(parents=True)
    assert shutil.which("unshare"), "unshare is not installed: run scripts/setup (util-linux)"
    run = subprocess.run(["unshare", "-m", "sh", "-c", _MOUNTED, "sh", str(tmp_path),
                          sys.executable], capture_output=True, text=True)
    if "mount" in run.stderr and run.returncode != 0:
        pytest.skip(f"cannot mount here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        f"output folder {str(tmp_path / 'out')!r} holds a mount point (scratch); the output "
        f"folder is replaced as a whole, so it cannot hold one", "mounted", "data"]


class TestLock:
    """Writers of one folder take turns; one that cannot get its turn says so."""

    def hold(self, out: Path) -> int:
        fd = os.open(out.with_name(f".{out.name}.lock"), os.O_RDONLY | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def test_busy_folder_fails_naming_it(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        fd = self.hold(out)
        try:
            started = time.monotonic()
            with pytest.raises(OutputError, match=f"another torchstack generate is writing "
                                                  f"'{out}'"):
                write_set(out, SET, lock_wait=0.3)
            assert time.monotonic() - started >= 0.3
        finally:
            os.close(fd)
        assert not out.exists()

    def test_waits_for_the_other_writer(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        fd = self.hold(out)
        threading.Timer(0.3, os.close, [fd]).start()
        assert write_set(out, SET, lock_wait=10) == []
        assert content(out) == SET
        assert leftovers(tmp_path) == []

    def test_a_lock_file_that_is_no_file(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / ".out.lock")
        with pytest.raises(OutputError, match="not a regular file"):
            write_set(tmp_path / "out", SET, lock_wait=0.1)

    def test_threads_never_lose_a_set(self, tmp_path: Path) -> None:
        """Eight writers of different files at once: every file arrives."""
        out, errors = tmp_path / "out", []

        def writer(i: int) -> None:
            try:
                write_set(out, {f"f{i}-{j}.eb": f"{i}\n" for j in range(30)})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(content(out)) == 8 * 30
        assert leftovers(tmp_path) == []


Fault = Callable[..., object]


def _fail(number: int) -> Fault:
    """An OSError as the kernel gives it, naming the first path among the arguments."""
    def fail(*args: object, **kwargs: object) -> object:
        path = next(a for a in args if isinstance(a, (str, Path)))
        raise OSError(number, os.strerror(number), os.fsdecode(path))
    return fail


class TestErrorsNameTheFolder:
    """Whatever fails inside, the message names the folder as given, never `.tmp-*`."""

    @PROPERTY
    @given(step=st.sampled_from(["write_text", "link", "chmod", "rename", "mkdir"]),
           number=st.sampled_from([errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS]),
           existing=st.booleans())
    def test_fault(self, tmp_path_factory: pytest.TempPathFactory, step: str, number: int,
                   existing: bool) -> None:
        with fresh(tmp_path_factory) as root, contextlib.chdir(root):
            out = Path("out")
            if existing:
                out.mkdir()
                (out / "local.eb").write_text("keep\n")
            before = content(out) if existing else None
            patch = pytest.MonkeyPatch()
            if step == "write_text":
                patch.setattr(Path, "write_text", lambda self, *a, **k: _fail(number)(self))
            else:
                real = getattr(os, step)

                def faulty(*args: object, **kwargs: object) -> object:
                    if any(".tmp-" in os.fsdecode(a) for a in args  # type: ignore[arg-type]
                           if isinstance(a, (str, Path))):
                        return _fail(number)(*args)
                    return real(*args, **kwargs)

                patch.setattr(os, step, faulty)
                patch.setattr(output, "_exchange", lambda *a: False)
            try:
                write_set(out, SET)
            except OutputError as exc:
                message = str(exc)
            else:
                message = ""
            finally:
                patch.undo()
            # a failed hard link falls back to a copy; a new folder gets no chmod
            assert bool(message) == (step not in ("link", "chmod") or (existing and
                                     step == "chmod")), (step, existing, message)
            if message:
                assert message.startswith("cannot write output folder 'out': "), message
                assert ".tmp-" not in message, message
                assert os.strerror(number) in message
                assert (content(out) if existing else None) == before
            assert leftovers(root) == []
