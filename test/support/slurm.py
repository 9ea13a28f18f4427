"""A real single-node Slurm on 127.0.0.1 for tests: munged, slurmctld and slurmd from Debian.

    with shared_cluster() as cluster:          # started once, waits (bounded) for an idle node
        env = {**os.environ, **cluster.environ()}  # SLURM_CONF for sbatch, squeue, eb --job
        cluster.run("sbatch", "--wrap", "hostname")
        cluster.wait_for_jobs(timeout=600)     # until the queue holds nothing pending or running

No systemd: the daemons run in the foreground as children of the test process, with their state,
logs, a private munge key and socket in a fresh folder under /tmp (munged wants every folder
above its socket searchable by all, which pytest's 0700 temporary folders are not), and free
ports on 127.0.0.1. The one node is named after this machine (`hostname -s`), with its CPUs and
a small RealMemory; one partition, the default. Process tracking by /proc and no task plugin:
no cgroups. Jobs run as root, like the tests. `stop()` cancels what is left in the queue, then
ends the daemons it started, by process id. A daemon that does not come up raises with its log:
a broken Slurm fails the tests that need it, it never skips them.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
_PR_SET_PDEATHSIG = 1  # prctl(2)
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "RESIZING", "SIGNALING", "STAGE_OUT")


class SlurmFailure(RuntimeError):
    """The test cluster did not start or did not finish its jobs in time."""


def node_name() -> str:
    return socket.gethostname().split(".")[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class SlurmCluster:
    """One running test cluster; see the module docstring."""

    root: Path
    node: str = field(default_factory=node_name)
    cpus: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def environ(self) -> dict[str, str]:
        """What a client (sbatch, squeue, eb --job, torchstack jobs) needs to reach it."""
        return {"SLURM_CONF": str(self.conf)}

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        for folder in ("munge", "state", "spool", "log"):
            (self.root / folder).mkdir(mode=0o755, exist_ok=True)
        self.root.chmod(0o755)
        self._write_munge_key()
        self.conf.write_text(self._slurm_conf())
        self._spawn("munged", ["munged", "--foreground", f"--socket={self.munge_socket}",
                               f"--key-file={self.root / 'munge' / 'munge.key'}",
                               f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
        self._wait("munged", lambda: self.munge_socket.is_socket())
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self._client("scontrol", "ping").returncode == 0)
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
        self._wait("slurmd", self._node_idle)
        return self

    def stop(self) -> None:
        """Cancel every job of this cluster, then end the daemons (slurmd first)."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", *jobs, check=False)
                self._settle()
        for name in reversed(DAEMONS):
            process = self.processes.pop(name, None)
            if process is not None:
                _end(process)
        shutil.rmtree(self.root, ignore_errors=True)

    def _settle(self) -> None:
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and self.active_jobs():
            time.sleep(0.5)

    # -- use ----------------------------------------------------------------------------------

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster; SlurmFailure when it fails (check)."""
        result = self._client(*command)
        if check and result.returncode != 0:
            raise SlurmFailure(f"{' '.join(command)}: exit {result.returncode}: "
                               f"{result.stderr.strip()}\n{self.logs()}")
        return result

    def queue(self) -> list[dict[str, str]]:
        """Every job Slurm still knows (finished ones for MinJobAge), as squeue fields."""
        fields = ("JobID", "Name", "State", "Reason", "StartTime", "EndTime", "Dependency",
                  "StdOut")
        out = self.run("squeue", "-h", "-t", "all", "-O",
                       ",".join(f"{f}:|" for f in fields)).stdout
        rows = [line.split("|")[:len(fields)] for line in out.splitlines() if line.strip()]
        return [dict(zip(fields, (cell.strip() for cell in row))) for row in rows]

    def active_jobs(self) -> list[dict[str, str]]:
        return [job for job in self.queue() if job["State"] in ACTIVE]

    def wait_for_jobs(self, timeout: float) -> list[dict[str, str]]:
        """Wait until no job is pending or running; SlurmFailure after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.active_jobs():
            if time.monotonic() > deadline:
                raise SlurmFailure(f"jobs still active after {timeout:.0f} s: "
                                   f"{self.active_jobs()}")
            self._check_alive()
            time.sleep(2)
        return self.queue()

    def logs(self, lines: int = 20) -> str:
        """The last lines of every daemon's log, for failure messages."""
        parts = []
        for log in sorted((self.root / "log").glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- helpers ------------------------------------------------------------------------------

    def _slurm_conf(self) -> str:
        root = self.root
        return textwrap.dedent(f"""\
            ClusterName=torchstack
            SlurmctldHost={self.node}(127.0.0.1)
            SlurmctldPort={_free_port()}
            SlurmdPort={_free_port()}
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            AuthInfo=socket={self.munge_socket}
            CredType=cred/munge
            StateSaveLocation={root / 'state'}
            SlurmdSpoolDir={root / 'spool'}
            SlurmctldPidFile={root / 'slurmctld.pid'}
            SlurmdPidFile={root / 'slurmd.pid'}
            SlurmctldLogFile={root / 'log' / 'slurmctld.log'}
            SlurmdLogFile={root / 'log' / 'slurmd.log'}
            MailProg=/bin/true
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            JobCompType=jobcomp/none
            MpiDefault=none
            SchedulerType=sched/backfill
            SelectType=select/cons_tres
            SelectTypeParameters=CR_Core
            ReturnToService=2
            MinJobAge=3600
            NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN
            PartitionName=main Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
            """)

    def _write_munge_key(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)

    def _spawn(self, name: str, command: list[str]) -> None:
        program = shutil.which(command[0]) or shutil.which(command[0], path="/usr/sbin:/sbin")
        if program is None:
            raise SlurmFailure(f"{command[0]} is not installed: run scripts/setup "
                               f"(apt-get install munge slurmctld slurmd slurm-client)")
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            self.processes[name] = subprocess.Popen([program, *command[1:]], stdout=out,
                                                    stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL,
                                                    preexec_fn=_die_with_parent)

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            self._check_alive()
            if time.monotonic() > deadline:
                raise SlurmFailure(f"{name} not ready after {START_TIMEOUT:.0f} s\n{self.logs()}")
            time.sleep(0.3)

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise SlurmFailure(f"{name} exited with {process.returncode}\n{self.logs()}")

    def _node_idle(self) -> bool:
        result = self._client("sinfo", "-h", "-N", "-n", self.node, "-o", "%T")
        return result.returncode == 0 and result.stdout.strip() == "idle"

    def _client(self, *command: str) -> subprocess.CompletedProcess[str]:
        # squeue prints job names and paths as users gave them, which may be no UTF-8
        return subprocess.run(list(command), env={**os.environ, **self.environ()},
                              capture_output=True, text=True, errors="replace", check=False,
                              timeout=60)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so no daemon outlives a killed run."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_lock = threading.Lock()
_shared: list[SlurmCluster] = []
_users = [0]


@contextmanager
def shared_cluster() -> Iterator[SlurmCluster]:
    """The session's one cluster: started by the first user, stopped when the last one is done."""
    with _lock:
        if not _shared:
            root = Path(tempfile.mkdtemp(prefix="torchstack-slurm-"))
            cluster = SlurmCluster(root)
            try:
                cluster.start()
            except BaseException:
                cluster.stop()
                raise
            _shared.append(cluster)
        _users[0] += 1
    try:
        yield _shared[0]
    finally:
        with _lock:
            _users[0] -= 1
            if _users[0] == 0:
                _shared.pop().stop()


def eb_environ(base: dict[str, str], cluster: SlurmCluster) -> dict[str, str]:
    """`base` (an EasyBuild environment) for `eb --job` on the cluster: the jobs inherit it,
    so eb, torchstack and uv come from this Python's bin folder, and root is allowed."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    return {**base, **cluster.environ(), "PATH": path,
            "EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES": "1"}
