"""A generated set built on a real Slurm with `eb --robot="$PWD" --job`, as a site builds a release.

A local index serves the real torch 2.13.0+cpu wheel and two pure-Python consumers built here
(torchvision 0.28.0+cpu and torchaudio 2.13.0+cpu, both pinning torch==2.13.0). `torchstack
generate` writes the set for the system toolchain of a small robot path whose Python is the
tests' stand-in module; torchaudio's easyconfig then gets a wrong checksum. The set is
submitted with the command of `jobs.submit_command`, run by bash in the output folder as a
site would; the index stops as soon as the submission returns, so the jobs can only use what
EasyBuild fetched on the submitting host. Checked: one job per easyconfig, the consumers held
(afterok) until PyTorch finished, modules with fingerprints and guards for the two good
easyconfigs, and the broken one failing alone, reported by `torchstack jobs`.

The status logic is also tested on its own, on job folders written here and a fixed queue.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.dedupe import SESSION
from support.ebenv import PYTHON_VERSION, EasyBuildEnv, make_python_root
from support.indexserver import IndexServer
from support.joblogs import CHECKSUM_FAILED, KILLED, MISSING_DEPENDENCY, SUBMISSION, SUCCEEDED
from support.slurm import SlurmCluster, eb_environ, shared_cluster
from support.wheelbuild import build_wheel
from support.wheelcache import cache_dir, cache_lock

from torchstack.cli import main
from torchstack.generator import jobs
from torchstack.guards.record import FINGERPRINT_FILE

JOB_TIMEOUT = 900  # a bound on waiting for the jobs, not a pass/fail threshold
EASYSTACK = "easystack-system-system-cpu-x86_64.yaml"
TORCH, VISION, AUDIO = "PyTorch-2.13.0-whl", "torchvision-0.28.0-whl", "torchaudio-2.13.0-whl"
BROKEN_SHA256 = hashlib.sha256(b"not the wheel").hexdigest()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    with shared_cluster() as cluster:
        yield cluster


@dataclass
class Submitted:
    env: EasyBuildEnv
    out: Path
    jobs_dir: Path
    submission: str
    queue_at_submission: dict[str, dict[str, str]]  # by job name
    queue_at_end: dict[str, dict[str, str]]
    fetched: set[str]  # wheel files the index served


def _robot_path(folder: Path, python_root: Path) -> Path:
    """Python-<this version>.eb (SYSTEM) listing the stand-in venv's packages as extensions,
    as a site's Python module lists what it provides."""
    listed = subprocess.run(
        [str(python_root / "bin" / "python"), "-c",
         "import importlib.metadata as m, json; "
         "print(json.dumps(sorted({d.metadata['Name']: d.version for d in m.distributions()}"
         ".items())))"], capture_output=True, text=True, check=True).stdout
    exts = ",\n".join(f"    ({name!r}, {version!r})" for name, version in json.loads(listed))
    folder.mkdir(parents=True)
    (folder / f"Python-{PYTHON_VERSION}.eb").write_text(
        f"easyblock = 'ConfigureMake'\nname = 'Python'\nversion = '{PYTHON_VERSION}'\n"
        f"homepage = 'https://www.python.org/'\ndescription = \"Python (stand-in)\"\n"
        f"toolchain = SYSTEM\nexts_list = [\n{exts},\n]\nmoduleclass = 'lang'\n")
    return folder


def _consumers(folder: Path) -> list[Path]:
    folder.mkdir()
    return [build_wheel(folder, name, version, {f"{name}/__init__.py": b"import torch\n"},
                        requires=("torch==2.13.0",))
            for name, version in (("torchvision", "0.28.0+cpu"), ("torchaudio", "2.13.0+cpu"))]


def _break_checksum(easyconfig: Path) -> None:
    text = easyconfig.read_text()
    good = re.findall(r"'([0-9a-f]{64})'", text)
    assert len(good) == 1, good
    easyconfig.write_text(text.replace(good[0], BROKEN_SHA256))


def _by_name(queue: list[dict[str, str]], jobs_dir: Path) -> dict[str, dict[str, str]]:
    return {job["Name"]: job for job in queue if Path(job["StdOut"]).parent == jobs_dir}


@pytest.fixture(scope="module")
def submitted(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory,
              real_wheel: object) -> Submitted:
    root = tmp_path_factory.mktemp("cluster-build")
    with cache_lock("pyroot"):
        env = EasyBuildEnv(root, make_python_root(cache_dir())).setup()
    robot = _robot_path(root / "robot", env.python_root)
    wheels = [real_wheel("torch-2.13.0"), *_consumers(root / "wheels")]  # type: ignore[operator]
    out = root / "generated"
    with IndexServer(wheels) as server:
        assert main(["generate", "2.13.0", "--toolchain", "system", "--robot-paths", str(robot),
                     "--arch", "x86_64", "--index", server.index_url, "--out", str(out)]) == 0
        _break_checksum(out / f"{AUDIO}.eb")
        command = jobs.submit_command(EASYSTACK, jobs.easystack_entries(out / EASYSTACK))
        environ = eb_environ(env.environ(shared_uv_cache=True), slurm_cluster)
        result = subprocess.run(["bash", "-c", command], cwd=out, capture_output=True,
                                text=True, env=environ, check=False)
        fetched = {h.path.rsplit("/", 1)[-1] for h in server.hits if h.path.endswith(".whl")}
    jobs_dir = out / jobs.jobs_folder(EASYSTACK)
    at_submission = _by_name(slurm_cluster.queue(), jobs_dir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    at_end = _by_name(slurm_cluster.wait_for_jobs(JOB_TIMEOUT), jobs_dir)
    SESSION.link_installs(env.installpath / "software")  # eb ran in jobs, not through run_eb
    return Submitted(env, out, jobs_dir, (jobs_dir / jobs.SUBMISSION_LOG).read_text(),
                     at_submission, at_end, fetched)


class TestClusterBuild:
    def test_one_job_per_easyconfig_in_one_submission(self, submitted: Submitted) -> None:
        assert "List of submitted jobs (3): " in submitted.submission, submitted.submission
        assert set(submitted.queue_at_submission) == {TORCH, VISION, AUDIO}

    def test_sources_fetched_on_the_submitting_host(self, submitted: Submitted) -> None:
        # every wheel came from the index during the submission; the jobs ran without it
        assert len(submitted.fetched) == 3, submitted.fetched
        assert all(name.endswith(".whl") for name in submitted.fetched)

    def test_consumers_wait_for_pytorch(self, submitted: Submitted) -> None:
        torch_id = submitted.queue_at_submission[TORCH]["JobID"]
        for consumer in (VISION, AUDIO):
            dependency = submitted.queue_at_submission[consumer]["Dependency"]
            assert dependency.startswith(f"afterok:{torch_id}"), dependency

    def test_jobs_ran_in_dependency_order(self, submitted: Submitted) -> None:
        queue = submitted.queue_at_end
        assert {name: job["State"] for name, job in queue.items()} == {
            TORCH: "COMPLETED", VISION: "COMPLETED", AUDIO: "FAILED"}
        for consumer in (VISION, AUDIO):  # Slurm's own record, to the second
            assert queue[consumer]["StartTime"] >= queue[TORCH]["EndTime"]

    def test_modules_fingerprinted_and_guarded(self, submitted: Submitted) -> None:
        env = submitted.env
        modules = env.installpath / "modules" / "all"
        provider = (modules / "PyTorch" / "2.13.0-whl.lua").read_text()
        consumer = (modules / "torchvision" / "0.28.0-whl.lua").read_text()
        assert not (modules / "torchaudio" / "2.13.0-whl.lua").exists()  # the broken one
        assert "torchstack: provider torch-2.13.0-cxx11-cpu" in provider
        assert "TORCHSTACK_TORCH_ABI" in provider
        assert consumer.index("TORCHSTACK_CONSUMERS") < consumer.index('depends_on("PyTorch/')
        for software in ("PyTorch/2.13.0-whl", "torchvision/0.28.0-whl"):
            recorded = json.loads((env.installpath / "software" / software / FINGERPRINT_FILE)
                                  .read_text())
            assert recorded["torch"]["release"] == "2.13.0"
        loaded = env.shell("module load torchvision/0.28.0-whl\n"
                           "python -c 'import torchvision, torch; print(torch.__version__)'")
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stdout.strip() == "2.13.0+cpu"

    def test_configuration_reaches_the_jobs(self, submitted: Submitted) -> None:
        # the jobs ran eb with the submitting shell's options and environment: torchstack's
        # easyblock and hooks, this install path
        build_log = next((submitted.env.installpath / "software" / "torchvision" / "0.28.0-whl"
                          / "easybuild").glob("easybuild-torchvision-*.log")).read_text()
        assert "Running 'module_write_hook' hook function" in build_log
        assert "PyTorchWheels" in build_log

    def test_status_reports_the_failure_alone(self, submitted: Submitted,
                                              slurm_cluster: SlurmCluster,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
        monkeypatch.setenv("SLURM_CONF", slurm_cluster.environ()["SLURM_CONF"])
        assert main(["jobs", str(submitted.jobs_dir)]) == 1
        lines = capsys.readouterr().out.splitlines()
        ids = {name: submitted.queue_at_end[name]["JobID"] for name in (TORCH, VISION, AUDIO)}
        assert lines[0] == f"done     {TORCH} (job {ids[TORCH]})"
        assert lines[2] == f"done     {VISION} (job {ids[VISION]})"
        assert lines[4] == (f"failed   {AUDIO} (job {ids[AUDIO]}): Checksum verification for "
                            f"extension source torchaudio-2.13.0+cpu-py3-none-any.whl failed")
        failed_log = Path(lines[5].split("log: ", 1)[1])
        assert BROKEN_SHA256 in failed_log.read_text()  # EasyBuild's log of the failed build
        assert lines[6:] == ["3 jobs: 2 done, 1 failed"]  # no note: squeue answered

    def test_status_as_json(self, submitted: Submitted,
                            capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["jobs", str(submitted.jobs_dir), "--json"]) == 1
        found = json.loads(capsys.readouterr().out)
        assert found["counts"] == {"done": 2, "failed": 1}
        assert [job["module"] for job in found["jobs"]] == [
            "PyTorch/2.13.0-whl", "torchvision/0.28.0-whl", "torchaudio/2.13.0-whl"]


# -- the status logic on its own: job folders written here, a fixed queue ---------------------


class FixedQueue:
    """A batch queue that lists given jobs, or fails as squeue does without a controller."""

    def __init__(self, *entries: jobs.QueueEntry, error: str | None = None) -> None:
        self.listed = list(entries)
        self.error = error

    def entries(self) -> list[jobs.QueueEntry]:
        if self.error is not None:
            raise jobs.JobsError(self.error)
        return self.listed


def _entry(folder: Path, job_id: str, name: str, state: str, reason: str = "None",
           elsewhere: bool = False) -> jobs.QueueEntry:
    parent = folder.parent / "other" if elsewhere else folder
    return jobs.QueueEntry(job_id, name, state, reason, f"{parent}/{name}-%j.out")


class TestParseOutput:
    @pytest.mark.parametrize(("text", "success", "reason", "log"), [
        (SUCCEEDED, True, "", "/site/sw/PyTorch/easybuild/eb.log"),
        # the FAILED line wins over the ERROR line, without EasyBuild's timing
        (CHECKSUM_FAILED, False, "Checksum verification for extension source "
         "t-1.0-py3-none-any.whl failed", "/tmp/eb-x/easybuild-t-1.0.log"),
        # failed before any build: only an ERROR line, no log named
        (MISSING_DEPENDENCY, False, "Missing dependencies: Python/3.13.1", None),
        # killed by Slurm in the middle of the build
        (KILLED, False, "JOB 7 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT",
         None),
        # still running
        ("== installing...\n", None, "", None),
        # --keep-going style summary that is not a full success
        ("== Build succeeded for 0 out of 1\n", False, "build succeeded for 0 out of 1", None),
    ], ids=["succeeded", "checksum", "missing-dependency", "killed", "running", "partial"])
    def test_verdict(self, text: str, success: bool | None, reason: str,
                     log: str | None) -> None:
        assert jobs.parse_output(text) == jobs.Verdict(success, reason, log)


class TestParseSubmission:
    def test_names_modules_and_ids(self) -> None:
        assert jobs.parse_submission("== resolving dependencies ...\n" + SUBMISSION) == [
            ("PyTorch-2.13.0-whl", "PyTorch/2.13.0-whl", "11"),
            ("torchvision-0.28.0-whl", "torchvision/0.28.0-whl", "12"),
            ("torchaudio-2.13.0-whl", "torchaudio/2.13.0-whl", "13")]

    def test_no_submission(self) -> None:
        assert jobs.parse_submission(MISSING_DEPENDENCY) == []

    def test_unexpected_entry(self) -> None:
        with pytest.raises(jobs.JobsError, match=r"unexpected entry 'PyTorch: 11'"):
            jobs.parse_submission("== List of submitted jobs (1): PyTorch: 11\n")


class TestParseSqueue:
    def test_fields_and_noise(self) -> None:
        text = ("12|torchvision-0.28.0-whl|PENDING|Dependency|/s/jobs/torchvision-%j.out|\n"
                "squeue: error: something\n\n")
        assert jobs.parse_squeue(text) == [jobs.QueueEntry(
            "12", "torchvision-0.28.0-whl", "PENDING", "Dependency", "/s/jobs/torchvision-%j.out")]


class TestStatus:
    def test_states_from_files_and_queue(self, tmp_path: Path) -> None:
        (tmp_path / jobs.SUBMISSION_LOG).write_text(SUBMISSION)
        (tmp_path / "PyTorch-2.13.0-whl-11.out").write_text(SUCCEEDED)
        (tmp_path / "torchvision-0.28.0-whl-12.out").write_text("== installing...\n")
        queue = FixedQueue(_entry(tmp_path, "11", "PyTorch-2.13.0-whl", "COMPLETED"),
                           _entry(tmp_path, "12", "torchvision-0.28.0-whl", "RUNNING"),
                           _entry(tmp_path, "13", "torchaudio-2.13.0-whl", "PENDING",
                                  "Dependency"),
                           _entry(tmp_path, "14", "other-1.0", "RUNNING", elsewhere=True))
        found = jobs.status(tmp_path, queue)
        assert [(j.name, j.job_id, j.state, j.reason) for j in found.jobs] == [
            ("PyTorch-2.13.0-whl", "11", "done", ""),
            ("torchvision-0.28.0-whl", "12", "running", ""),
            ("torchaudio-2.13.0-whl", "13", "pending", "waiting (Dependency)")]
        assert found.jobs[1].log == str(tmp_path / "torchvision-0.28.0-whl-12.out")
        assert not found.all_done and found.notes == ()

    @pytest.mark.parametrize("state", ["PENDING", "CANCELLED"])  # before and after Slurm
    def test_dependency_failed_and_forgotten_jobs(self, tmp_path: Path, state: str) -> None:
        (tmp_path / jobs.SUBMISSION_LOG).write_text(SUBMISSION)
        (tmp_path / "PyTorch-2.13.0-whl-11.out").write_text("== installing...\n")
        queue = FixedQueue(_entry(tmp_path, "12", "torchvision-0.28.0-whl", state,
                                  "DependencyNeverSatisfied"))  # kills it (kill-on-invalid-dep)
        found = {j.name: j for j in jobs.status(tmp_path, queue).jobs}
        # PyTorch ended (the queue no longer has it) without EasyBuild's verdict
        assert found["PyTorch-2.13.0-whl"].state == "failed"
        assert found["PyTorch-2.13.0-whl"].reason == "ended without EasyBuild's verdict"
        assert found["torchvision-0.28.0-whl"].reason == "not run: a job it depends on failed"
        # known from the submission only: Slurm forgot it, it left no output
        assert found["torchaudio-2.13.0-whl"].state == "unknown"

    def test_files_only_without_a_queue(self, tmp_path: Path) -> None:
        (tmp_path / "PyTorch-2.13.0-whl-11.out").write_text(SUCCEEDED)
        (tmp_path / "torchvision-0.28.0-whl-12.out").write_text("== installing...\n")
        found = jobs.status(tmp_path, FixedQueue(error="'squeue' failed: 'no controller'"))
        assert [j.state for j in found.jobs] == ["done", "unknown"]
        assert found.notes == ("'squeue' failed: 'no controller': states from the output "
                               "files only",)

    def test_resubmission_wins(self, tmp_path: Path) -> None:
        (tmp_path / "t-1.0-whl-7.out").write_text(CHECKSUM_FAILED)
        (tmp_path / "t-1.0-whl-21.out").write_text(SUCCEEDED)
        found = jobs.status(tmp_path, None)
        assert [(j.job_id, j.state) for j in found.jobs] == [("21", "done")]
        assert found.all_done

    def test_last_submission_wins_even_with_a_lower_job_id(self, tmp_path: Path) -> None:
        # the first round: PyTorch done as job 1, t failed as job 3; then t alone was
        # submitted again to a cluster whose job ids started anew, and runs as job 1
        (tmp_path / "PyTorch-2.13.0-whl-1.out").write_text(SUCCEEDED)
        (tmp_path / "t-1.0-whl-3.out").write_text(CHECKSUM_FAILED)
        (tmp_path / "t-1.0-whl-1.out").write_text("== installing...\n")
        (tmp_path / jobs.SUBMISSION_LOG).write_text(
            "== List of submitted jobs (1): t-1.0-whl (t/1.0-whl): 1\n")
        queue = FixedQueue(_entry(tmp_path, "1", "t-1.0-whl", "RUNNING"))
        found = jobs.status(tmp_path, queue)
        assert [(j.name, j.job_id, j.state) for j in found.jobs] == [
            ("t-1.0-whl", "1", "running"), ("PyTorch-2.13.0-whl", "1", "done")]

    def test_failed_submission(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_path / jobs.SUBMISSION_LOG).write_text(MISSING_DEPENDENCY)
        assert main(["jobs", str(tmp_path), "--no-queue"]) == 1
        assert ("note: submitted.log: no job submitted: Missing dependencies: Python/3.13.1"
                in capsys.readouterr().out)

    @pytest.mark.parametrize("make", ["missing", "file", "empty"])
    def test_nothing_to_report(self, tmp_path: Path, make: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
        folder = tmp_path / "jobs"
        if make == "file":
            folder.write_text("")
        elif make == "empty":
            folder.mkdir()
        assert main(["jobs", str(folder), "--no-queue"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"torchstack: error: {str(folder)!r}") and err.count("\n") == 1


class TestSubmitCommand:
    def test_lists_the_easyconfigs_in_one_submission(self) -> None:
        command = jobs.submit_command("easystack-foss-2025a-cpu-x86_64.yaml",
                                      ["PyTorch-2.9.1-foss-2025a-whl.eb",
                                       "torchvision-0.24.1-foss-2025a-whl.eb"])
        assert command == (
            'mkdir -p jobs-foss-2025a-cpu-x86_64 && eb --robot="$PWD" --job --job-backend=Slurm '
            '--job-output-dir="$PWD/"jobs-foss-2025a-cpu-x86_64 '
            '--include-easyblocks="$(torchstack easyblocks-path)/*.py" '
            '--hooks="$(torchstack hooks-path)" PyTorch-2.9.1-foss-2025a-whl.eb '
            'torchvision-0.24.1-foss-2025a-whl.eb 2>&1 | tee jobs-foss-2025a-cpu-x86_64/'
            'submitted.log')

    def test_names_are_quoted(self) -> None:
        command = jobs.submit_command("easystack-x.yaml", ["a b.eb", "$(reboot).eb"])
        assert "'a b.eb' '$(reboot).eb' 2>&1" in command

    def test_empty_easystack(self) -> None:
        with pytest.raises(jobs.JobsError, match=r"'easystack-x.yaml' lists no easyconfig"):
            jobs.submit_command("easystack-x.yaml", [])

    def test_unreadable_easystack(self, tmp_path: Path) -> None:
        bad = tmp_path / "easystack-bad.yaml"
        bad.write_text("easyconfigs: [unclosed\n")
        with pytest.raises(jobs.JobsError, match=r"is not a readable easystack"):
            jobs.easystack_entries(bad)
