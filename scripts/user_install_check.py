"""The Python half of scripts/user-install-check: what is easier to check in Python than in bash.

Run by the user-install venv's Python in isolated mode (`python -I`, outside the checkout), so
that `import torchstack` can only find the installed wheel, never the checkout's torchstack/.
This file imports nothing of torchstack at module level; `imports` and `subcommands` import
the installed package and fail if it does not lie inside the venv.

    files WHEEL SOURCE          the wheel holds every file of the source tree it should, and
                                no module the source tree lacks (a stale build/ folder)
    imports SOURCE              every module of the source tree imports from the installed
                                package; the templates and catalog files are installed
    subcommands                 the subcommands of `torchstack --help`, one a line
    toy-wheel DIR               a small pure-Python torch consumer wheel (requires torch>=2.13)
    install-tree ROOT FP_TORCH WHEEL_TOY
                                a small EasyBuild install path: Python, PyTorch (wheel and
                                source build, recorded fingerprints) and the toy consumer
                                installed from its wheel (fingerprinted on the fly)
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib
import io
import json
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path

PACKAGE = "torchstack"
# Folders of the source tree mapped into the package (setup.cfg's package_dir).
MAPPED = {"easyblocks": "torchstack/easyblocks", "templates": "torchstack/templates",
          "easyconfigs": "torchstack/easyconfigs"}
PYTHON = "Python/3.11.7"
WHEEL_TORCH, SOURCE_TORCH = "PyTorch/2.13.0-whl", "PyTorch/2.13.0"
TOY = "torchtoy/1.0-PyTorch-2.13.0-whl"
FINGERPRINT_FILE = Path("easybuild") / "torchstack-fingerprint.json"


def fail(message: str) -> None:
    print(f"user-install-check: {message}", file=sys.stderr)
    sys.exit(1)


def expected_files(source: Path) -> set[str]:
    """The package files the wheel must hold, as paths inside the wheel."""
    found = {p.relative_to(source).as_posix() for p in (source / PACKAGE).rglob("*.py")}
    found |= {"torchstack/py.typed"}
    found |= {p.relative_to(source).as_posix()
              for p in (source / PACKAGE / "index" / "catalog_data").glob("*.json")}
    for folder, target in MAPPED.items():
        for path in (source / folder).iterdir():
            if path.suffix in (".py", ".j2") or path.name == "README.rst":
                found.add(f"{target}/{path.name}")
    # the shipped easyconfigs, whole: l/Name/*.eb and the easystacks beside them
    tree = source / "easyconfigs"
    found |= {f"{MAPPED['easyconfigs']}/{p.relative_to(tree).as_posix()}"
              for p in [*tree.glob("*/*/*.eb"), *tree.glob("easystack-*.yaml")]}
    return {p for p in found if "__pycache__" not in p}


def check_files(wheel: Path, source: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        held = {n for n in archive.namelist() if not n.endswith("/")}
    expected = expected_files(source)
    missing = sorted(expected - held)
    if missing:
        fail(f"{wheel.name} lacks {len(missing)} file(s) of the source tree: "
             + ", ".join(missing))
    stale = sorted(n for n in held if n.startswith(f"{PACKAGE}/") and n.endswith(".py")
                   and n not in expected)
    if stale:
        fail(f"{wheel.name} holds module(s) the source tree lacks: " + ", ".join(stale))
    if not any(n.endswith(".dist-info/entry_points.txt") for n in held):
        fail(f"{wheel.name} has no entry_points.txt: no `torchstack` command")
    print(f"user-install-check: {wheel.name} holds all {len(expected)} files of the source tree")


def module_names(source: Path) -> list[str]:
    names = []
    for path in sorted((source / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    for folder, target in MAPPED.items():
        for path in sorted((source / folder).glob("*.py")):
            package = target.replace("/", ".")
            names.append(package if path.stem == "__init__" else f"{package}.{path.stem}")
    return names


def installed_package() -> Path:
    """The installed torchstack, which must lie inside the running venv."""
    try:
        import torchstack
    except ImportError as exc:
        fail(f"torchstack is not installed in {sys.prefix}: {exc}")
    root = Path(torchstack.__file__).resolve().parent
    if Path(sys.prefix).resolve() not in root.parents:
        fail(f"torchstack imported from {root}, not from the venv {sys.prefix}")
    return root


def check_imports(source: Path) -> None:
    root = installed_package()
    names = module_names(source)
    failed = []
    for name in names:
        if name == "torchstack.__main__":  # runs the command line on import
            if not (root / "__main__.py").is_file():
                failed.append(f"{name}: not installed")
            continue
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # any failure names the module
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if Path(sys.prefix).resolve() not in Path(module.__file__ or "/").resolve().parents:
            failed.append(f"{name}: imported from {module.__file__}, outside the venv")
    for folder in ("templates",):
        for path in (source / folder).glob("*.j2"):
            if not (root / folder / path.name).is_file():
                failed.append(f"torchstack/{folder}/{path.name}: not installed")
    catalog = sorted(p.name for p in (source / PACKAGE / "index" / "catalog_data").glob("*.json"))
    if not catalog:
        failed.append("torchstack/index/catalog_data: the source tree holds no catalog")
    for name in catalog:
        path = root / "index" / "catalog_data" / name
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            failed.append(f"torchstack/index/catalog_data/{name}: {exc}")
    if failed:
        fail("the installed package fails:\n  " + "\n  ".join(failed))
    print(f"user-install-check: {len(names)} modules, the templates and {len(catalog)} catalog "
          f"files import or read from {root}")


def print_subcommands() -> None:
    installed_package()
    import argparse

    from torchstack.cli import build_parser

    parser = build_parser()
    for action in parser._actions:  # argparse keeps its subparsers here only
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                print(name)


def toy_wheel(folder: Path) -> Path:
    """torchtoy 1.0: `import torch`, Requires-Dist torch>=2.13, nothing compiled."""
    dist = "torchtoy-1.0.dist-info"
    files = {
        "torchtoy/__init__.py": b"import torch\n\n\ndef double(x):\n"
                                b"    return torch.as_tensor(x) * 2\n",
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: torchtoy\nVersion: 1.0\n"
                            b"Requires-Dist: torch>=2.13\n",
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: user-install-check\n"
                         b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist}/RECORD", "", ""])
    files[f"{dist}/RECORD"] = record.getvalue().encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "torchtoy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    print(path)
    return path


def easyconfig(name: str, version: str, suffix: str, deps: list[tuple[str, ...]]) -> str:
    return textwrap.dedent(f"""\
        easyblock = 'PythonPackage'

        name = {name!r}
        version = {version!r}
        versionsuffix = {suffix!r}

        homepage = 'https://example.org/'
        description = "{name} (torchstack user-install-check)"

        toolchain = SYSTEM

        sources = [SOURCE_TAR_GZ]

        dependencies = {[('Python', '3.11.7'), *deps]!r}

        moduleclass = 'ai'
        """)


def install_tree(root: Path, torch_fingerprint: Path, toy: Path) -> None:
    """Module files and installations as EasyBuild leaves them, written by hand."""

    def install(module: str, loads: tuple[str, ...], recipe: str | None) -> Path:
        name, _, version = module.partition("/")
        path = root / "modules" / "all" / name / f"{version}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f'depends_on("{m}")\n' for m in loads), encoding="utf-8")
        software = root / "software" / name / version
        (software / "easybuild").mkdir(parents=True)
        if recipe is not None:
            (software / "easybuild" / f"{name}-{version}.eb").write_text(recipe)
        return software

    install(PYTHON, (), None)
    for module, suffix in ((WHEEL_TORCH, "-whl"), (SOURCE_TORCH, "")):
        software = install(module, (PYTHON,), easyconfig("PyTorch", "2.13.0", suffix, []))
        shutil.copyfile(torch_fingerprint, software / FINGERPRINT_FILE)
    software = install(TOY, (WHEEL_TORCH,), easyconfig(
        "torchtoy", "1.0", "-PyTorch-2.13.0-whl", [("PyTorch", "2.13.0", "-whl")]))
    with zipfile.ZipFile(toy) as archive:
        archive.extractall(software / "lib" / "python3.11" / "site-packages")


def main(argv: list[str]) -> None:
    command, *args = argv or [""]
    if command == "files" and len(args) == 2:
        check_files(Path(args[0]), Path(args[1]))
    elif command == "imports" and len(args) == 1:
        check_imports(Path(args[0]))
    elif command == "subcommands" and not args:
        print_subcommands()
    elif command == "toy-wheel" and len(args) == 1:
        toy_wheel(Path(args[0]))
    elif command == "install-tree" and len(args) == 3:
        install_tree(Path(args[0]), Path(args[1]), Path(args[2]))
    else:
        fail(f"usage: {__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
