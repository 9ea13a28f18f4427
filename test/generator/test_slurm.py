"""The test cluster itself: a real Slurm runs a batch job, and `eb --job --job-backend=Slurm`
builds a PythonPackage through it into a module that works."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ebenv import PYTHON_VERSION, EasyBuildEnv, make_python_root
from support.slurm import SlurmCluster, eb_environ, shared_cluster
from support.wheelcache import cache_dir, cache_lock

from torchstack.cli import main

JOB_TIMEOUT = 600  # a bound on waiting, never a pass/fail threshold


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    with shared_cluster() as cluster:
        yield cluster


def _sdist(folder: Path, name: str, version: str) -> Path:
    """A pure-Python sdist that setuptools builds offline (the stand-in Python has it)."""
    members = {
        "pyproject.toml": textwrap.dedent(f"""\
            [build-system]
            requires = ["setuptools>=64"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "{version}"
            """),
        f"{name}/__init__.py": "def answer():\n    return 42\n",
    }
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _python_package(env: EasyBuildEnv, name: str, version: str) -> Path:
    source = _sdist(env.root, name, version)
    env.stage_source(name, source)
    checksum = hashlib.sha256(source.read_bytes()).hexdigest()
    easyconfig = env.root / f"{name}-{version}.eb"
    easyconfig.write_text(textwrap.dedent(f"""\
        easyblock = 'PythonPackage'
        name = '{name}'
        version = '{version}'
        homepage = 'https://example.org/{name}'
        description = "A pure-Python package built through Slurm (torchstack test)"
        toolchain = SYSTEM
        sources = ['{source.name}']
        checksums = ['{checksum}']
        dependencies = [('Python', '{PYTHON_VERSION}')]
        moduleclass = 'tools'
        """))
    return easyconfig


class TestCluster:
    def test_batch_job_runs_on_the_node(self, slurm_cluster: SlurmCluster,
                                        tmp_path: Path) -> None:
        out = tmp_path / "hostname.out"
        submitted = slurm_cluster.run("sbatch", "--wrap", "hostname -s", "--output", str(out))
        assert submitted.stdout.startswith("Submitted batch job ")
        slurm_cluster.wait_for_jobs(JOB_TIMEOUT)
        assert out.read_text().strip() == slurm_cluster.node

    def test_eb_job_builds_a_python_package(self, slurm_cluster: SlurmCluster,
                                            tmp_path_factory: pytest.TempPathFactory,
                                            capsys: pytest.CaptureFixture[str]) -> None:
        with cache_lock("pyroot"):
            env = EasyBuildEnv(tmp_path_factory.mktemp("eb-job"),
                               make_python_root(cache_dir())).setup()
        easyconfig = _python_package(env, "tsjobsmoke", "1.0")
        jobs = env.root / "jobs"
        jobs.mkdir()
        submit = subprocess.run(
            [sys.executable, "-m", "easybuild.main", str(easyconfig), "--job",
             "--job-backend=Slurm", f"--job-output-dir={jobs}"],
            env=eb_environ(env.environ(), slurm_cluster), cwd=env.root, capture_output=True,
            text=True, check=False)
        assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-2000:]
        assert "List of submitted jobs (1): tsjobsmoke-1.0 (tsjobsmoke/1.0)" in submit.stdout
        slurm_cluster.wait_for_jobs(JOB_TIMEOUT)
        loaded = env.shell("module load tsjobsmoke/1.0\n"
                           "python -c 'import tsjobsmoke; print(tsjobsmoke.answer())'")
        assert loaded.returncode == 0, loaded.stderr + slurm_cluster.logs()
        assert loaded.stdout.strip() == "42"
        # the job's own output says so, and the status command reads it
        assert main(["jobs", str(jobs), "--no-queue"]) == 0
        report = capsys.readouterr().out
        assert report.startswith("done     tsjobsmoke-1.0 (job ")
        assert f"log: {env.installpath}/software/tsjobsmoke/1.0/easybuild/" in report


class TestQueueBytes:
    def test_latin1_job_name_and_folder(self, slurm_cluster: SlurmCluster,
                                        tmp_path: Path) -> None:
        # a held job (it stays pending) named, and writing into a folder named, in Latin-1:
        # squeue prints the bytes as given; jobs shows its line with the byte replaced
        folder = Path(os.fsdecode(bytes(tmp_path) + b"/jos\xe9/jobs"))  # as argv decodes it
        folder.mkdir(parents=True)
        submitted = slurm_cluster.run("sbatch", "--hold", "--job-name", "caf\udce9-1.0",
                                      "--output", f"{folder}/caf\udce9-1.0-%j.out",
                                      "--wrap", "true")
        job_id = submitted.stdout.split()[-1]
        try:
            done = subprocess.run([sys.executable, "-m", "torchstack", "jobs", bytes(folder)],
                                  env={**os.environ, **slurm_cluster.environ()},
                                  capture_output=True, timeout=60, check=False)
        finally:
            slurm_cluster.run("scancel", job_id)
        out, err = done.stdout.decode(), done.stderr.decode()
        assert (done.returncode, err) == (1, ""), out + err
        assert out.splitlines() == [f"pending  caf\ufffd-1.0 (job {job_id}): waiting "
                                    "(JobHeldUser)", "1 job: 1 pending"]
