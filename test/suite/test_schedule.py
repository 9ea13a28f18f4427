"""The split of the suite between pytest-xdist's workers (support/schedule.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import schedule
from support.doctorenv import REPO


class FakeItem:
    """What group_and_order reads of a pytest item, and the markers it adds."""

    def __init__(self, nodeid: str, *fixtures: str, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.fixturenames = fixtures
        self.marks = [pytest.mark.slow.mark] if slow else []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.marks.append(marker.mark)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((m for m in self.marks if m.name == name), None)

    def group(self) -> str:
        found = self.get_closest_marker("xdist_group")
        assert found is not None
        return str(found.args[0])


def _ordered(items: list[FakeItem], durations: dict[str, float]) -> list[str]:
    schedule.group_and_order(items, durations)  # type: ignore[arg-type]
    return [item.nodeid for item in items]


def test_units_longest_first_each_in_collection_order() -> None:
    items = [FakeItem("a.py::one"), FakeItem("b.py::one"), FakeItem("a.py::two"),
             FakeItem("c.py::one")]
    durations = {"a.py::one": 1.0, "a.py::two": 1.0, "b.py::one": 5.0, "c.py::one": 0.5}
    assert _ordered(items, durations) == ["b.py::one", "a.py::one", "a.py::two", "c.py::one"]
    assert [item.group() for item in items] == ["b.py", "a.py", "a.py", "c.py"]


def test_shared_fixture_makes_one_unit_across_files() -> None:
    items = [FakeItem("a.py::one", "slurm_cluster"), FakeItem("b.py::one"),
             FakeItem("c.py::one", "tmp_path", "slurm_cluster"), FakeItem("d.py::one", "em_env"),
             FakeItem("e.py::one", "eb_env", "cuda_wheels_module")]
    _ordered(items, {})
    assert {item.nodeid: item.group() for item in items} == {
        "a.py::one": "slurm", "c.py::one": "slurm", "b.py::one": "b.py",
        "d.py::one": "envmodules", "e.py::one": "pytorch-modules"}


def test_file_goes_whole_into_its_shared_unit() -> None:
    """The other tests of a file that uses a shared fixture run beside it: the file's module
    fixtures are then made on one worker only."""
    items = [FakeItem("a.py::plain"), FakeItem("a.py::cuda", "cuda_wheels_module"),
             FakeItem("b.py::plain")]
    _ordered(items, {})
    assert {item.nodeid: item.group() for item in items} == {
        "a.py::plain": "pytorch-modules", "a.py::cuda": "pytorch-modules", "b.py::plain": "b.py"}


def test_shared_units_meeting_in_a_file_become_one() -> None:
    items = [FakeItem("a.py::em", "em_env"), FakeItem("b.py::cuda", "cuda_wheels_module"),
             FakeItem("b.py::em", "em_env"), FakeItem("c.py::slurm", "slurm_cluster"),
             FakeItem("d.py::cuda", "cuda_wheels_module")]
    _ordered(items, {})
    groups = {item.nodeid: item.group() for item in items}
    assert len({groups[k] for k in ("a.py::em", "b.py::cuda", "b.py::em", "d.py::cuda")}) == 1
    assert groups["a.py::em"] in ("envmodules", "pytorch-modules")
    assert groups["c.py::slurm"] == "slurm"


def test_one_test_using_two_shared_fixtures_joins_their_units() -> None:
    items = [FakeItem("a.py::both", "em_env", "slurm_cluster"), FakeItem("b.py::em", "em_env"),
             FakeItem("c.py::slurm", "slurm_cluster")]
    _ordered(items, {})
    assert len({item.group() for item in items}) == 1


def test_unmeasured_unit_first_if_slow_last_if_not() -> None:
    items = [FakeItem("known.py::t"), FakeItem("new.py::t"), FakeItem("newslow.py::t", slow=True)]
    assert _ordered(items, {"known.py::t": 30.0}) == ["newslow.py::t", "known.py::t", "new.py::t"]


@pytest.mark.parametrize(("reported", "plain"), [
    ("a.py::t@slurm", "a.py::t"),
    ("a.py::t[x@y]", "a.py::t[x@y]"),
    ("a.py::t[x@y]@a.py", "a.py::t[x@y]"),
    ("a.py::t", "a.py::t"),
])
def test_plain_id_drops_only_the_group_suffix(reported: str, plain: str) -> None:
    assert schedule.plain_id(reported) == plain


def test_record_merges_and_survives_damage(tmp_path: Path) -> None:
    record = tmp_path / schedule.RECORD
    assert schedule.load(record) == {}
    schedule.save(record, [("a", 1.0), ("b", 2.0)])
    schedule.save(record, [("b", 3.0)])
    assert schedule.load(record) == {"a": 1.0, "b": 3.0}
    record.write_text('{"a": 1.0, "b": "x"')
    assert schedule.load(record) == {}
    record.write_text('{"a": 1.0, "b": "x", "c": true}')
    assert schedule.load(record) == {"a": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == [schedule.RECORD]


def test_units_reach_pytest_xdist(tmp_path: Path) -> None:
    # pytest-xdist sends a unit's tests to one worker by the unit appended to their ids; under
    # pytest 9.2 that suffix is lost without a word (pytest-dev/pytest-xdist#1386), the tests
    # of a unit are spread over the workers and each makes the unit's fixtures. A real run of
    # one small file as scripts/test runs the suite, with this Python's pytest and pytest-xdist
    # (a cache of its own: its durations stay out of the machine's record).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TORCHSTACK_CACHE"] = str(tmp_path)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
         "no:cacheprovider", "test/core/test_wheeltags.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    passed = [line.split()[-1] for line in ran.stdout.splitlines() if " PASSED " in line]
    assert len(passed) >= 10
    assert all(nodeid.endswith("@test/core/test_wheeltags.py") for nodeid in passed), passed
