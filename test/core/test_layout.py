"""The import graph of torchstack, read from its source with ast: no cycles, nothing imports up.

Every import counts, also one inside a function: a lazy import is still a dependency. Importing
`torchstack.doctor.findings` runs `torchstack/doctor/__init__.py` first, but that is no edge
here: a package's __init__ may gather its own modules without making each of them cyclic.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import torchstack

PACKAGE = Path(torchstack.__file__).resolve().parent

# What each layer may import besides itself (docs/design.rst, Import direction). Core is every
# top-level module and the core packages (CORE_PACKAGES), a subsystem any other subpackage,
# `python -m torchstack` (__main__) the command line. Nothing imports cli.
CORE_PACKAGES = {"elf", "fingerprint"}
ALLOWED = {
    "core": set(),
    "index": {"core"},
    "generator": {"core", "index"},
    "guards": {"core"},
    "install": {"core", "guards"},
    "doctor": {"core"},
    "venv": {"core", "doctor"},
    "rollout": {"core", "generator", "guards"},
}
ALLOWED["cli"] = set(ALLOWED)

Graph = dict[str, set[str]]


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name of every module under the package folder `root`."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Dotted names one import statement asks for: a module, or a module and its attributes."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(root: Path) -> Graph:
    """Module -> the package's modules it imports (`from pkg import mod` names pkg.mod)."""
    names = module_names(root)
    graph: Graph = {}
    for module, path in names.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                asked = _imported(node, module, path.name == "__init__.py")
                hits = {name for name in asked[1:] if name in names}
                if isinstance(node, ast.Import) or not hits:
                    hits |= {name for name in asked[:1] if name in names}
                targets |= hits
        graph[module] = targets - {module}
    return graph


def layer(module: str, subsystems: set[str]) -> str:
    parts = module.split(".")
    if parts[1:] == ["__main__"]:
        return "cli"
    return parts[1] if len(parts) > 1 and parts[1] in subsystems else "core"


def subpackages(root: Path, core: set[str] = CORE_PACKAGES) -> set[str]:
    """The subsystems: every subpackage but the core's own packages."""
    return {init.parent.name for init in root.glob("*/__init__.py")} - core


def upward_imports(graph: Graph, allowed: dict[str, set[str]], subsystems: set[str]
                   ) -> list[str]:
    found = []
    for module, targets in graph.items():
        own = layer(module, subsystems)
        found += [f"{module} ({own}) imports {target}" for target in targets
                  if layer(target, subsystems) not in {own, *allowed.get(own, ())}]
    return sorted(found)


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


# -- torchstack itself ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(PACKAGE)


def test_every_subpackage_has_a_layer() -> None:
    unlisted = sorted(subpackages(PACKAGE) - set(ALLOWED))
    assert unlisted == [], f"give {unlisted} a row in ALLOWED"


def test_core_packages_are_core(graph: Graph) -> None:
    # elf/ and fingerprint/ are the core's, split by subject: they may import the flat core
    # modules and each other, and every subsystem may import them
    subsystems = subpackages(PACKAGE)
    assert {init.parent.name for init in PACKAGE.glob("*/__init__.py")} >= CORE_PACKAGES
    assert not CORE_PACKAGES & subsystems
    assert layer("torchstack.elf.loader", subsystems) == "core"
    assert layer("torchstack.fingerprint.compat", subsystems) == "core"
    assert "torchstack.elf.reader" in graph["torchstack.fingerprint.read"]


def test_the_graph_is_read(graph: Graph) -> None:
    assert graph["torchstack.__main__"] == {"torchstack.cli"}
    # imports inside functions, of a package and of one of its modules
    assert {"torchstack.doctor", "torchstack.doctor.findings"} <= graph["torchstack.cli.doctor"]


KNOWN_UPWARD: list[str] = []


def test_no_upward_imports(graph: Graph) -> None:
    assert upward_imports(graph, ALLOWED, subpackages(PACKAGE)) == KNOWN_UPWARD


KNOWN_CYCLES: list[list[str]] = []


def test_no_cycles(graph: Graph) -> None:
    assert cycles(graph) == KNOWN_CYCLES


# -- the checks themselves, on a small package --------------------------------------------------


@pytest.fixture
def tangled(tmp_path: Path) -> Path:
    """pkg: core module `a` imports the subsystem `low`, whose `x` and `y` import each other."""
    root = tmp_path / "pkg"
    (root / "low").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    from pkg.low import x\n")
    (root / "low" / "__init__.py").write_text("from . import x\n")
    (root / "low" / "x.py").write_text("from .y import Y\nimport pkg.a\n")
    (root / "low" / "y.py").write_text("from pkg.low import x as X\nY = 1\n")
    return root


def test_relative_and_lazy_imports_are_read(tangled: Path) -> None:
    assert import_graph(tangled) == {
        "pkg": set(), "pkg.a": {"pkg.low.x"}, "pkg.low": {"pkg.low.x"},
        "pkg.low.x": {"pkg.low.y", "pkg.a"}, "pkg.low.y": {"pkg.low.x"},
    }


def test_finds_upward_imports_and_cycles(tangled: Path) -> None:
    graph = import_graph(tangled)
    assert upward_imports(graph, {"core": set(), "low": {"core"}}, {"low"}) == [
        "pkg.a (core) imports pkg.low.x"]
    assert cycles(graph) == [["pkg.a", "pkg.low.x", "pkg.low.y"]]
