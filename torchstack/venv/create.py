"""`torchstack venv DIR`: a venv on the module's Python that keeps the module's torch.

`plan` reads the environment and refuses what cannot work (DIR in use or a path the venv's
files would mangle, no torch from a loaded module, a Python that belongs to another venv or
cannot run the module's torch) before anything is written; `create` runs
`python -m venv --system-site-packages` with the module's Python and adds torchstack's files.
A failure, Ctrl-C or SIGTERM removes what was made, so DIR is left as it was found. A venv
cannot be made elsewhere and renamed (its path is written into its scripts), so a kill -9
can still leave one half made: a marker file, removed last, tells a re-run what it is.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from torchstack.distributions import normalize_name, tree_distributions
from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.placement import Places
from torchstack.doctor.stack import Stack, read_stack
from torchstack.doctor.surroundings import Surroundings
from torchstack.doctor.venvrecord import (
    CONSTRAINTS,
    EXCLUDES,
    PIP_CONF,
    RECORD,
    UV_TOML,
    VenvRecord,
)
from torchstack.fingerprint.read import Fingerprint
from torchstack.output import replace_file
from torchstack.venv import VenvError, activate, paths
from torchstack.venv.pins import (
    Pin,
    constraints_text,
    excludes_text,
    module_distributions,
    module_pins,
    modules_of,
    pip_conf_text,
    uv_toml_text,
)
from torchstack.venv.python import check_runs_module_torch, check_sees_module_torch
from torchstack.venv.scripts import console_scripts

log = logging.getLogger(__name__)

_TIMEOUT = 900
PTH = "_torchstack_module_python.pth"
INCOMPLETE = ".torchstack-venv-incomplete"  # in DIR from its first file to its last


@dataclass(frozen=True)
class Plan:
    """What `create` will make: where, on which Python, with which pins."""

    target: Path
    interpreter: Interpreter
    provider: Fingerprint
    pins: tuple[Pin, ...]
    modules: tuple[str, ...]
    module_python_sites: tuple[str, ...]  # the module Python's own site-packages, if a venv
    provided: frozenset[str]  # normalized names of every module-provided distribution

    @property
    def bin_dir(self) -> Path:
        return self.target / "bin"

    @property
    def site_packages(self) -> Path:
        return self.target / "lib" / f"python{self.interpreter.version_text}" / "site-packages"

    def record(self) -> VenvRecord:
        return VenvRecord(self.modules, self.interpreter.executable, self.provider.version,
                          self.provider.abi_tag, {p.name: p.version for p in self.pins})


def plan(target: Path, interpreter: Interpreter, environ: Mapping[str, str]) -> Plan:
    """Check that a venv can be made at `target` on top of the loaded modules."""
    paths.check(target)
    _check_target(target)
    surroundings = Surroundings.from_environ(environ)
    places = Places(interpreter, surroundings)
    stack = read_stack(interpreter.path)
    check_sees_module_torch(stack, places)
    provider = _module_torch(stack, places, interpreter)
    sites = _own_sites(interpreter, surroundings)
    provided = module_distributions(stack, places)
    pins = module_pins(provided)
    loaded = [m for m in environ.get("LOADEDMODULES", "").split(":") if m]
    return Plan(target.absolute(), interpreter, provider, tuple(pins),
                tuple(modules_of(pins, loaded)), tuple(sites),
                frozenset(normalize_name(p.name) for p in provided))


def _check_target(target: Path) -> None:
    if target.is_symlink() and not target.exists():
        raise VenvError(f"{str(target)!r} is a dangling symbolic link")
    if not target.exists():
        return
    if not target.is_dir():
        raise VenvError(f"{str(target)!r} exists and is not a folder")
    if (target / INCOMPLETE).exists():
        raise VenvError(f"{str(target)!r} holds a venv that torchstack venv did not finish "
                        "(it was killed): remove that folder and run torchstack venv again")
    if any(target.iterdir()):
        raise VenvError(f"{str(target)!r} exists and is not empty")


def _module_torch(stack: Stack, places: Places, interpreter: Interpreter) -> Fingerprint:
    """The fingerprint of the torch a loaded module provides; refuses any other torch."""
    python = interpreter.executable
    if stack.torch is None:
        raise VenvError(f"no PyTorch module is loaded: {python} sees no torch "
                        "(module load PyTorch/<version> first)")
    origin = places.origin(stack.torch.folder)
    if origin.kind != "module" or origin.module is None:
        raise VenvError(f"no PyTorch module is loaded: the torch that {python} sees comes "
                        f"from {origin.label}, not from a loaded module")
    check_runs_module_torch(stack.torch, places, origin.module)
    if stack.provider is None:
        raise VenvError(f"the torch of module {origin.module} in {stack.torch.folder} cannot be "
                        f"read: {stack.provider_error}")
    return stack.provider


def _own_sites(interpreter: Interpreter, surroundings: Surroundings) -> list[str]:
    """The site-packages of a module Python that is itself a venv: a venv made from it is
    based on the Python under it, so these have to be added back (by a .pth file)."""
    if not interpreter.in_venv:
        return []
    if surroundings.owner(interpreter.prefix) is None:
        raise VenvError(f"{interpreter.executable} is the Python of the venv "
                        f"{interpreter.prefix}, not of a loaded module: deactivate that venv "
                        "or pass --python")
    root = os.path.realpath(interpreter.prefix).rstrip("/") + "/"
    return [p for p in interpreter.path if os.path.realpath(p).startswith(root)
            and os.path.basename(p.rstrip("/")) == "site-packages"]


def create(plan: Plan, environ: Mapping[str, str]) -> list[str]:
    """Make the venv of `plan`; returns the console scripts it was given."""
    made = _missing_folders(plan.target)
    try:
        plan.target.mkdir(parents=True, exist_ok=True)
        replace_file(plan.target / INCOMPLETE, "torchstack venv is making this venv; if it is not "
               "running, it was killed: remove this folder and run it again\n")
        _make_venv(plan, environ)
        _drop_copies(plan, environ)
        scripts = _add_files(plan)
        (plan.target / INCOMPLETE).unlink()
        return scripts
    except BaseException:
        _remove(plan.target, made)
        raise


def _missing_folders(target: Path) -> list[Path]:
    """The folders from `target` up that do not exist yet, the outermost last."""
    missing = []
    for folder in [target, *target.parents]:
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    return missing


def _make_venv(plan: Plan, environ: Mapping[str, str]) -> None:
    _run([plan.interpreter.executable, "-m", "venv", "--system-site-packages",
          str(plan.target)], environ, f"{plan.interpreter.executable} -m venv {plan.target}")


def _run(command: list[str], environ: Mapping[str, str], what: str) -> None:
    log.debug("running %s", command)
    try:
        result = subprocess.run(command, env=dict(environ), capture_output=True, text=True,
                                timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VenvError(f"cannot run {what}: {exc}") from exc
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise VenvError(f"{what} failed: {last}")


def _drop_copies(plan: Plan, environ: Mapping[str, str]) -> None:
    """Uninstall what `venv` put in the venv that a module provides too (setuptools 65 of
    ensurepip on Python 3.11 would hide the module's newer one, which torch requires);
    the venv keeps its own pip, which installs into the venv."""
    copies = sorted(d.name for d in tree_distributions(plan.site_packages)
                    if d.key in plan.provided and d.key != "pip")
    if not copies:
        return
    _run([str(plan.bin_dir / "python"), "-m", "pip", "uninstall", "--yes", "--quiet",
          "--disable-pip-version-check", *copies], environ, "pip uninstall")


def _add_files(plan: Plan) -> list[str]:
    target = plan.target
    if plan.module_python_sites:
        replace_file(plan.site_packages / PTH, "".join(f"{p}\n" for p in plan.module_python_sites))
    modules = list(plan.modules)
    replace_file(target / CONSTRAINTS, constraints_text(list(plan.pins), target, modules))
    replace_file(target / PIP_CONF, pip_conf_text(target / CONSTRAINTS))
    replace_file(target / UV_TOML, uv_toml_text(list(plan.pins)))
    replace_file(target / EXCLUDES, excludes_text(list(plan.pins)))
    replace_file(target / RECORD, json.dumps(plan.record().to_json(), indent=2) + "\n")
    for path, text in activate.install(plan.bin_dir, target, modules).items():
        replace_file(path, text)
    return _write_console_scripts(plan)


def _write_console_scripts(plan: Plan) -> list[str]:
    written = []
    python = plan.bin_dir / "python"
    for script in console_scripts((p.folder, p.name) for p in plan.pins):
        path = plan.bin_dir / script.name
        if path.exists() or path.is_symlink():  # the venv's own pip, python, activate
            continue
        replace_file(path, script.text(python), mode=0o755)
        written.append(script.name)
    return written


def _remove(target: Path, made: list[Path]) -> None:
    """Remove what was made: the folders in `made` (the outermost last) whole, else what is
    in `target`; an empty folder that was there stays."""
    if made:
        shutil.rmtree(made[-1], ignore_errors=True)
        return
    if not target.is_dir():
        return
    for entry in target.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
