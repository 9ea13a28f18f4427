"""The stand of `torchstack venv` tests: the real PyTorch/2.13.0-whl module, a local index.

pip installs only from a simple index on 127.0.0.1 (support/indexserver.py) that serves
torchtoy (requires torch>=2.13), torchpin (requires torch==2.14.1), a pure-Python package,
and a small torch 2.14.1 that pip would take as a second torch if nothing stopped it. The
user's pip configuration of this machine (its local wheel folders) is kept out by a HOME of
the test's own; the venv's pip.conf is what is under test. Every path is shell-quoted, as a
venv's may hold spaces and quotes.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.doctorenv import REPO
from support.ebenv import PYTHON_VERSION, EasyBuildEnv
from support.indexserver import IndexServer
from support.wheelbuild import build_wheel

PYTORCH = "PyTorch/2.13.0-whl"
PYTHON = f"Python/{PYTHON_VERSION}"
_INSTALLER_VARIABLES = (
    "PIP_CONFIG_FILE", "PIP_CONSTRAINT", "PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
    "PIP_NO_INDEX", "XDG_CONFIG_HOME", "UV_CONSTRAINT", "UV_EXCLUDE", "UV_CONFIG_FILE",
    "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_FIND_LINKS",
    "UV_CACHE_DIR")


def q(path: Path | str) -> str:
    return shlex.quote(str(path))


@dataclass(frozen=True)
class Stand:
    """The module environment, the local index and a HOME without pip configuration."""

    eb_env: EasyBuildEnv
    index: IndexServer
    home: Path

    def shell(self, script: str, *, load: str = PYTORCH) -> tuple[int, str, str]:
        """Run `script` after `module load`; its exit code, stdout and stderr (Lmod's apart)."""
        unset = " ".join(_INSTALLER_VARIABLES)
        loading = f"module load {load}\n" if load else ""
        full = (f"export HOME={q(self.home)}\nunset {unset}\n{loading}"
                f"set +e\n{script}\necho \"rc=$?\"")
        run = self.eb_env.shell(full)
        assert run.returncode == 0, run.stderr
        body, _, code = run.stdout.rpartition("rc=")
        return int(code), body, run.stderr

    def torchstack(self, *args: str, load: str = PYTORCH, before: str = ""
                   ) -> tuple[int, str, str]:
        """`torchstack ARGS`, after the shell lines `before` (after `module load`)."""
        words = " ".join(q(a) for a in args)
        return self.shell(f"{before}cd {q(REPO)}\n{q(sys.executable)} -m torchstack {words}",
                          load=load)

    def pip(self, venv: Path, *args: str, environ: str = "") -> tuple[int, str, str]:
        """`venv/bin/pip install ARGS` from the local index only."""
        words = " ".join(q(a) for a in args)
        return self.shell(f"{environ}{q(venv / 'bin' / 'pip')} install "
                          "--disable-pip-version-check --no-cache-dir "
                          f"--index-url {self.index.index_url} {words}")

    def uv(self, venv: Path, *args: str) -> tuple[int, str, str]:
        """`uv pip install ARGS` into the venv, from the local index only."""
        words = " ".join(q(a) for a in args)
        return self.shell(f"{q(sys.executable)} -m uv pip install --python "
                          f"{q(venv / 'bin' / 'python')} --index-url {self.index.index_url} "
                          f"{words}")

    def make(self, venv: Path) -> str:
        code, out, err = self.torchstack("venv", str(venv))
        assert code == 0, err
        return out


@contextmanager
def venv_stand(eb_env: EasyBuildEnv, toy_wheel: Path, wheels: Path, home: Path
               ) -> Iterator[Stand]:
    """The stand, its index serving the wheels built into `wheels` while it is open."""
    served = [
        toy_wheel,
        build_wheel(wheels, "torchpin", "1.0", {"torchpin/__init__.py": b"import torch\n"},
                    requires=("torch==2.14.1",)),
        build_wheel(wheels, "purepkg", "1.0", {"purepkg/__init__.py": b"NAME = 'purepkg'\n"}),
        build_wheel(wheels, "torchneed", "1.0", {"torchneed/__init__.py": b"import torch\n"},
                    requires=("torch>=2.0",)),
        build_wheel(wheels, "torch", "2.14.1", {
            "torch/__init__.py": b"__version__ = '2.14.1'\n",
            "torch/version.py": b"__version__ = '2.14.1'\ncuda = None\nhip = None\n"}),
    ]
    with IndexServer(served) as index:
        yield Stand(eb_env, index, home)
