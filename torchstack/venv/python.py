"""Whether the chosen Python can run the module's torch, and which Python can.

`python3` first on PATH need not be the module's: a conda Python, a system Python of
another minor version, a Python module loaded after PyTorch's. Such a Python may still see
the module's site-packages (through $PYTHONPATH) while it cannot import the torch built
there, and a venv made on it is broken from the start. The checks read what torch was
built for (the tag of its `_C` extension, the pythonX.Y of its site-packages) with doctor's
own placement rules, and import nothing.
"""

from __future__ import annotations

import os

from torchstack.doctor.placement import (
    Places,
    foreign_extensions,
    invisible_torches,
    site_python,
)
from torchstack.doctor.stack import Placed, Stack
from torchstack.doctor.surroundings import Surroundings
from torchstack.venv import VenvError


def check_sees_module_torch(stack: Stack, places: Places) -> None:
    """Refuse a Python that does not see the torch that a loaded module provides."""
    if stack.torch is not None:
        return
    hidden = invisible_torches(stack, places)
    if not hidden:
        return
    versions = [site_python(s.path) for s in places.site_dirs
                if os.path.isfile(os.path.join(s.path, "torch", "__init__.py"))]
    hint = _module_python_hint(places.surroundings, [v for v in versions if v])
    raise VenvError(f"{hidden[0].message}; {hidden[0].fix}{hint}")


def check_runs_module_torch(torch: Placed, places: Places, module: str) -> None:
    """Refuse a Python that sees the module's torch but is not the one it was built for."""
    interpreter = places.interpreter
    built_for = site_python(torch.folder)
    extensions = foreign_extensions(torch.folder, interpreter)
    if not extensions and built_for in (None, interpreter.version_text):
        return
    what = f"Python {built_for}" if built_for else "another Python"
    tag = f" ({extensions[0]})" if extensions else ""
    raise VenvError(f"{interpreter.executable} is Python {interpreter.version_text}, but the "
                    f"torch of module {module} in {torch.folder} is built for {what}{tag}: "
                    f"{_use(places.surroundings, built_for, module)}")


def _use(surroundings: Surroundings, version: str | None, module: str) -> str:
    python = module_python(surroundings, [version]) if version else None
    if python is None:
        return (f"load the Python module that {module} was built with and make the venv "
                "with its python3 (first on PATH, or --python)")
    return (f"make the venv with the module's Python, {python[0]} of module {python[1]} "
            f"(--python {python[0]}, or put it first on PATH)")


def _module_python_hint(surroundings: Surroundings, versions: list[str]) -> str:
    python = module_python(surroundings, versions)
    return f" ({python[0]} of module {python[1]}: --python {python[0]})" if python else ""


def module_python(surroundings: Surroundings, versions: list[str]) -> tuple[str, str] | None:
    """The first python{X.Y} (of `versions`) that a loaded Python module has, and its name."""
    for version in versions:
        for module in surroundings.modules:
            if module.name.split("/")[0].lower() != "python":
                continue
            candidate = os.path.join(module.root, "bin", f"python{version}")
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate, module.name
    return None
