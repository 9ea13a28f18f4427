"""`torchstack scan` on installations it cannot read: unknown and not checked, never safe.

The install path of test_scan, with one consumer's installation damaged in every way below:
its folder missing, a symlink loop, a dangling symlink, a file, a FIFO, unreadable; its
recorded fingerprint truncated, random bytes, nested 10,000 deep, of wrong types, a FIFO, a
folder, a symlink loop, oversized. The module is listed as unknown with the reason, and a swap
of the PyTorch it runs on reports it as not checked and exits 1, also where every consumer
that could be read stays safe. The command runs as a process of its own under a timeout, so
that a FIFO cannot hang the test run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.scantree import (
    CPU,
    CU13,
    CU13_SOURCE,
    LIGHTNING,
    RECORDED,
    TORCHDATA,
    VISION_CXX,
    installpath_fixture,  # noqa: F401  (the fixture `installpath`, as `tree` below)
)
from support.scantree import VISION_STABLE as STABLE

from torchstack.fingerprint import compat
from torchstack.guards.record import FINGERPRINT_FILE
from torchstack.guards.scan import Unreadable, fingerprint_installation, plan_swap, scan_installpath
from torchstack.guards.sitepackage import MAX_FINGERPRINT_BYTES

GOOD = json.dumps(compat.recorded(RECORDED[STABLE]).to_json(), indent=2)


@pytest.fixture
def tree(request: pytest.FixtureRequest) -> Path:
    """test_scan's install path."""
    path: Path = request.getfixturevalue("installpath")
    return path


def scan(*argv: str) -> tuple[int, str, str]:
    """`torchstack scan ARGV` in a process of its own, under a timeout."""
    done = subprocess.run([sys.executable, "-m", "torchstack", "scan", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def _write(text: str | bytes) -> Callable[[Path], None]:
    data = text.encode() if isinstance(text, str) else text
    return lambda path: path.write_bytes(data)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _with(**fields: object) -> str:
    return json.dumps(compat.recorded(RECORDED[STABLE]).to_json() | fields)


def _symlink_to(target: str) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target)


def _folder(path: Path) -> None:
    path.mkdir()


# how the recorded fingerprint of a consumer is damaged
RECORDS: dict[str, Callable[[Path], None]] = {
    "empty": _write(""),
    "truncated": _write(GOOD[:len(GOOD) // 2]),
    "random-bytes": _write(random.Random(5).randbytes(300)),
    "not-utf8": _write(GOOD.replace("torchvision", "torchv\u00efsion").encode("latin-1")),
    "nested-10000": _write(_nested(10_000)),
    "nested-field-10000": _write(GOOD.replace('"torch_libraries": []',
                                              '"torch_libraries": ' + _nested(10_000))),
    "array": _write("[]"),
    "role-number": _write(_with(role=1)),
    "abi-tag-null": _write(_with(abi_tag=None)),
    "link-other": _write(_with(link="cuda")),
    "torch-string": _write(_with(torch="2.14.0")),
    "oversized": _write(GOOD + " " * MAX_FINGERPRINT_BYTES),
    "fifo": os.mkfifo,
    "folder": _folder,
    "symlink-loop": lambda path: path.symlink_to(path.name),
    "dangling-symlink": _symlink_to("gone.json"),
    "dev-zero": _symlink_to("/dev/zero"),
}


def _gone(software: Path) -> None:
    os.rename(software, software.with_name("elsewhere"))


def _replaced(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(software: Path) -> None:
        _gone(software)
        make(software)
    return damage


# how a consumer's installation folder is damaged
FOLDERS: dict[str, Callable[[Path], None]] = {
    "missing": _gone,
    "symlink-loop": _replaced(lambda path: path.symlink_to(path.name)),
    "dangling-symlink": _replaced(_symlink_to("nowhere")),
    "a-file": _replaced(lambda path: path.write_text("x", encoding="utf-8")),
    "a-fifo": _replaced(os.mkfifo),
}


def damage(root: Path, where: str, kind: str) -> None:
    """Damage the installation of the stable consumer, the only one on CU13."""
    if where == "record":
        record = root / "software" / STABLE / FINGERPRINT_FILE
        record.unlink()
        RECORDS[kind](record)
    else:
        FOLDERS[kind](root / "software" / STABLE)


CASES = [pytest.param("record", kind, id=f"record-{kind}") for kind in RECORDS] + [
    pytest.param("folder", kind, id=f"folder-{kind}") for kind in FOLDERS]


class TestSwapNotChecked:
    @pytest.mark.parametrize(("where", "kind"), CASES)
    def test_the_only_consumer_unreadable(self, tree: Path, where: str,
                                          kind: str) -> None:
        # CU13 -> its source build: safe (exit 0) while the consumer can be read
        damage(tree, where, kind)
        code, out, err = scan(str(tree), "--swap", CU13, CU13_SOURCE)
        lines = out.splitlines()
        assert (code, err) == (1, ""), out + err
        assert lines[0].endswith(f"0 consumer modules run on {CU13}, 1 more not checked")
        at = lines.index("not checked (not safe):")
        assert lines[at + 1].startswith(f"  {STABLE}: ")
        assert str(tree / "software" / STABLE) in lines[at + 1]
        assert lines[lines.index("stays safe:") + 1] == "  (none)"

    @pytest.mark.parametrize(("where", "kind"), CASES)
    def test_json_and_listing(self, tree: Path, where: str, kind: str) -> None:
        damage(tree, where, kind)
        code, out, _ = scan(str(tree), "--swap", CU13, CU13_SOURCE, "--json")
        data = json.loads(out)
        assert (code, data["safe"], data["stays_safe"]) == (1, False, [])
        assert [m["module"] for m in data["not_checked"]] == [STABLE]
        code, out, _ = scan(str(tree), "--json")
        modules = {m["module"]: m for m in json.loads(out)["modules"]}
        assert code == 1
        assert modules[STABLE]["role"] == "unknown" and modules[STABLE]["runs_on"] == CU13
        assert modules[STABLE]["unreadable"]
        assert modules[CPU]["role"] == "provider" and modules[CPU]["unreadable"] is None


class TestOtherModulesStillRead:
    def test_breaking_and_safe_beside_an_unknown_one(self, tree: Path) -> None:
        damage(tree, "folder", "missing")
        write_unknown = tree / "software" / LIGHTNING / FINGERPRINT_FILE
        write_unknown.write_text("{", encoding="utf-8")
        report = plan_swap(scan_installpath(tree), CPU, CU13)
        assert [o.module for o in report.would_break] == [TORCHDATA, VISION_CXX]
        assert [o.module for o in report.not_checked] == [LIGHTNING]
        assert report.stays_safe == () and not report.safe

    def test_unknown_modules_elsewhere_do_not_count(self, tree: Path) -> None:
        # unreadable, but its loads lead to CU13, not CPU: no part of a swap of CPU
        damage(tree, "folder", "missing")
        report = plan_swap(scan_installpath(tree), CPU, CU13)
        assert report.not_checked == ()

    def test_unreadable_from_is_an_error(self, tree: Path) -> None:
        (tree / "software" / CU13 / FINGERPRINT_FILE).write_text("{", "utf-8")
        code, out, err = scan(str(tree), "--swap", CU13, CU13_SOURCE)
        assert (code, out) == (2, "")
        assert f"FROM module {CU13!r} cannot be checked" in err and len(err.splitlines()) == 1

    def test_record_skips_and_names_unknown_modules(self, tree: Path) -> None:
        damage(tree, "record", "fifo")
        code, out, err = scan(str(tree), "--record")
        assert (code, err) == (1, "")
        assert f"recorded {TORCHDATA}: " in out
        assert f"not recorded {STABLE}: its recorded fingerprint " in out
        assert "is a FIFO, not a regular file" in out


class TestPermissionDenied:
    def test_unlistable_folder(self, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # root reads every folder: the refusal of an unprivileged user, imitated
        denied = tree / "software" / STABLE
        real = os.scandir

        def scandir(path: str | os.PathLike[str]) -> object:
            if Path(path) == denied:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
        report = plan_swap(scan_installpath(tree), CU13, CU13_SOURCE)
        assert [o.module for o in report.not_checked] == [STABLE]
        assert "Permission denied" in report.not_checked[0].reason and not report.safe


class TestTruncatedRecords:
    def test_every_offset(self, tree: Path) -> None:
        software = tree / "software" / STABLE
        record = software / FINGERPRINT_FILE
        accepted = []
        for offset in range(len(GOOD)):
            record.write_text(GOOD[:offset], encoding="utf-8")
            try:
                fingerprint_installation(software)
            except Unreadable as exc:
                assert str(record) in str(exc)
            else:
                accepted.append(offset)
        assert accepted == []

    @settings(max_examples=200, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.binary(max_size=400))
    def test_random_bytes(self, tree: Path, data: bytes) -> None:
        software = tree / "software" / STABLE
        (software / FINGERPRINT_FILE).write_bytes(data)
        with pytest.raises(Unreadable):
            fingerprint_installation(software)
