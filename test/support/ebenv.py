"""A real EasyBuild + Lmod environment for integration tests.

EasyBuild runs as `python -m easybuild.main` with a temporary install path; the Python
dependency is a hand-written Lmod module around a venv of this machine's Python (with the
runtime requirements of torch preinstalled, as a site's Python + SciPy-bundle would have).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from support.dedupe import SESSION
from support.wheelcache import uv_cache
from torchstack.install.wheels import SHARED_CACHE_ENV

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
LMOD_CMD = Path("/usr/share/lmod/lmod/libexec/lmod")
# What torch and torchvision import at run time and what `pip check` wants of them.
PYTHON_PACKAGES = ("typing-extensions", "sympy", "filelock", "jinja2", "fsspec", "networkx",
                   "numpy", "pillow", "setuptools>=77", "wheel")
PYTHON_VERSION = ".".join(str(v) for v in sys.version_info[:3])


def make_python_root(cache: Path) -> Path:
    """A venv of this Python with torch's runtime requirements; cached, it changes rarely."""
    key = hashlib.sha256(repr((sys.executable, PYTHON_PACKAGES)).encode()).hexdigest()[:12]
    root = cache / f"pyroot-{key}"
    if (root / ".complete").exists():
        return root
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", *PYTHON_PACKAGES],
        check=True,
    )
    (root / ".complete").touch()
    return root


@dataclass
class EasyBuildEnv:
    """Paths and environment of one EasyBuild installation used by a test session."""

    root: Path
    python_root: Path

    @property
    def installpath(self) -> Path:
        return self.root / "install"

    @property
    def sourcepath(self) -> Path:
        return self.root / "sources"

    @property
    def site_modules(self) -> Path:
        return self.root / "site-modules"

    @property
    def modulepath(self) -> str:
        return f"{self.installpath / 'modules' / 'all'}:{self.site_modules}"

    def setup(self) -> EasyBuildEnv:
        for path in (self.installpath, self.sourcepath, self.site_modules / "Python"):
            path.mkdir(parents=True, exist_ok=True)
        (self.site_modules / "Python" / f"{PYTHON_VERSION}.lua").write_text(textwrap.dedent(f"""\
            help([[Python {PYTHON_VERSION} of this machine, in a venv]])
            whatis("Description: Python {PYTHON_VERSION} (torchstack test stand-in)")
            setenv("EBROOTPYTHON", "{self.python_root}")
            setenv("EBVERSIONPYTHON", "{PYTHON_VERSION}")
            prepend_path("PATH", "{self.python_root / 'bin'}")
            """))
        return self

    def environ(self, shared_uv_cache: bool = False) -> dict[str, str]:
        """The environment of eb and of the module shells. With `shared_uv_cache`, eb's
        PyTorchWheels installs hard-link from the machine's uv cache (support/wheelcache.uv_cache)
        instead of each unpacking into a cache of its own, removed after it (the default)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("EASYBUILD_", "LMOD", "_LMFILES_", "LOADEDMODULES", "EBROOT",
                                    "EBVERSION", "MODULE", "__LMOD", SHARED_CACHE_ENV))}
        if shared_uv_cache:
            env[SHARED_CACHE_ENV] = str(uv_cache())
        env.update(
            LMOD_CMD=str(LMOD_CMD),
            MODULEPATH=self.modulepath,
            EASYBUILD_PREFIX=str(self.root / "eb"),
            EASYBUILD_INSTALLPATH=str(self.installpath),
            EASYBUILD_SOURCEPATH=str(self.sourcepath),
            EASYBUILD_BUILDPATH=str(self.root / "build"),
            EASYBUILD_MODULES_TOOL="Lmod",
            EASYBUILD_MODULE_SYNTAX="Lua",
            EASYBUILD_TMPDIR=str(self.root / "tmp"),
        )
        return env

    def remove(self, module: str) -> None:
        """Remove an installation (NAME/VERSION) and its module file: one that only a test
        module needs, so that the run does not hold its gigabytes to the end."""
        shutil.rmtree(self.installpath / "software" / module)
        for suffix in (".lua", ""):
            (self.installpath / "modules" / "all" / f"{module}{suffix}").unlink(missing_ok=True)

    def stage_source(self, software: str, wheel: Path, filename: str | None = None) -> Path:
        """Put a wheel where eb looks for the sources of `software`."""
        folder = self.sourcepath / software[0].lower() / software
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / (filename or wheel.name)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.symlink_to(wheel.resolve())
        return target

    def eb(self, easyconfig: Path, *options: str,
           shared_uv_cache: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the real eb on one easyconfig with torchstack's easyblocks."""
        return self.run_eb(str(easyconfig), *options, shared_uv_cache=shared_uv_cache)

    def eb_command(self, *args: str) -> list[str]:
        """The command line of the real eb with torchstack's easyblocks."""
        from torchstack.paths import easyblocks_path

        easyblocks = ",".join(str(p) for p in sorted(easyblocks_path().glob("*.py"))
                              if p.name != "__init__.py")
        return [sys.executable, "-m", "easybuild.main", *args,
                "--allow-use-as-root-and-accept-consequences",
                f"--include-easyblocks={easyblocks}"]

    def run_eb(self, *args: str, cwd: Path | None = None,
               shared_uv_cache: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the real eb with torchstack's easyblocks; returns its output, never raises.

        The large files of what it installed become hard links to identical ones of the
        session's earlier installs (support/dedupe.py): the same wheels are installed many
        times over, and the run's temporary disk holds each once."""
        environ = self.environ(shared_uv_cache)
        result = subprocess.run(self.eb_command(*args), env=environ, capture_output=True,
                                text=True, cwd=cwd or self.root, check=False)
        if result.returncode == 0:
            SESSION.know(uv_cache() / "archive-v0")
            SESSION.link_installs(self.installpath / "software")
        return result

    def shell(self, script: str) -> subprocess.CompletedProcess[str]:
        """Run bash with Lmod initialised; `module` commands work as a user's would."""
        full = f"source {shlex.quote(str(LMOD_INIT))}\nset -e\n{script}\n"
        return subprocess.run(["bash", "-c", full], env=self.environ(), capture_output=True,
                              text=True, cwd=self.root, check=False)


def wheel_easyconfig(
    path: Path, name: str, version: str, exts: list[tuple[str, str, Path, str]],
    dependencies: list[tuple[str, ...]] | None = None, versionsuffix: str = "-whl",
    extra: str = "", toolchain: str = "SYSTEM", easyblock: str = "PyTorchWheels",
) -> Path:
    """Write a PyTorchWheels easyconfig; exts are (name, version, wheel, sha256)."""
    deps: list[tuple[str, ...]] = [("Python", PYTHON_VERSION), *(dependencies or [])]
    ext_lines = "\n".join(
        f"    ({ext!r}, {ver!r}, {{\n"
        f"        'sources': [{wheel.name!r}],\n"
        f"        'checksums': [{{{wheel.name!r}: {checksum!r}}}],\n"
        f"    }}),"
        for ext, ver, wheel, checksum in exts
    )
    path.write_text(textwrap.dedent(f"""\
        easyblock = {easyblock!r}

        name = {name!r}
        version = {version!r}
        versionsuffix = {versionsuffix!r}

        homepage = 'https://pytorch.org/'
        description = "{name} from wheels (torchstack test)"

        toolchain = {toolchain}

        dependencies = {deps!r}

        exts_list = [
        """) + ext_lines + "\n]\n" + extra + "\nmoduleclass = 'ai'\n")
    return path


GCC_VERSION = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True,
                             check=True).stdout.strip()


def write_gcccore_toolchain(env: EasyBuildEnv, bindir: Path | None = None) -> str:
    """GCCcore/<system gcc version> as a site module, and Python built with it: a toolchain
    with a C++ compiler, so PyTorchWheels runs its C++ extension check. `bindir` goes first
    on PATH: compiler wrappers that stand in for a site's broken compiler."""
    folder = env.site_modules / "GCCcore"
    folder.mkdir(parents=True, exist_ok=True)
    path = f'prepend_path("PATH", "{bindir}")\n' if bindir else ""
    (folder / f"{GCC_VERSION}.lua").write_text(textwrap.dedent(f"""\
        help([[The system's GCC {GCC_VERSION} (torchstack test stand-in)]])
        setenv("EBROOTGCCCORE", "/usr")
        setenv("EBVERSIONGCCCORE", "{GCC_VERSION}")
        """) + path)
    python = (env.site_modules / "Python" / f"{PYTHON_VERSION}.lua").read_text()
    (env.site_modules / "Python" / f"{PYTHON_VERSION}-GCCcore-{GCC_VERSION}.lua").write_text(
        python)
    return GCC_VERSION
