"""Place the guard halves in the text of a module file, Lua or Tcl.

The provider half goes at the end of a PyTorch module. The consumer half must run before the
consumer's `depends_on` of PyTorch loads a PyTorch module, so it goes right before that line
(EasyBuild writes modluafooter after the dependencies, too late for it). See docs/design.rst,
"The two halves".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from torchstack.errors import TorchstackError
from torchstack.fingerprint.read import Fingerprint
from torchstack.guards import halves

SYNTAXES = ("Lua", "Tcl")


class ModuleFileError(TorchstackError):
    """A module file whose dependency on PyTorch cannot be found, or an unknown syntax."""


def torch_module(dependencies: Iterable[Mapping[str, object]]) -> str | None:
    """The module name of the PyTorch dependency among EasyBuild's dependency dicts, as the
    module file loads it and Lmod knows it: the short name (`PyTorch/2.6.0` of HierarchicalMNS's
    `Core/PyTorch/2.6.0`; the same as the full name in a flat scheme)."""
    names = [str(d.get("short_mod_name") or d["full_mod_name"])
             for d in dependencies if d.get("name") == "PyTorch"]
    return names[0] if names else None


def provider_block(fingerprint: Fingerprint, module: str, syntax: str) -> str:
    _check_syntax(syntax)
    if syntax == "Lua":
        return halves.provider_lua(fingerprint, module)
    return halves.provider_tcl(fingerprint, module)


def consumer_block(fingerprint: Fingerprint, module: str, provider_module: str, syntax: str) -> str:
    _check_syntax(syntax)
    if syntax == "Lua":
        return halves.consumer_lua(fingerprint, module, provider_module)
    return halves.consumer_tcl(fingerprint, module, provider_module)


def insert_before_dependency(text: str, dependency: str, block: str) -> str:
    """`block` on its own lines before the first line that loads `dependency`."""
    mention = re.compile(r"(?<![\w./-])" + re.escape(dependency) + r"(?![\w./-])")
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if mention.search(line) and not line.lstrip().startswith(("--", "#")):
            return "".join([*lines[:index], block.rstrip("\n") + "\n", *lines[index:]])
    raise ModuleFileError(f"the module file does not load {dependency!r}")


def guard_module_text(
    text: str, fingerprint: Fingerprint, module: str, provider_module: str | None, syntax: str
) -> str:
    """The module text with the guard half its fingerprint calls for."""
    if fingerprint.role == "provider":
        return text.rstrip("\n") + "\n\n" + provider_block(fingerprint, module, syntax)
    if provider_module is None:
        return text
    block = consumer_block(fingerprint, module, provider_module, syntax)
    return insert_before_dependency(text, provider_module, block)


def _check_syntax(syntax: str) -> None:
    if syntax not in SYNTAXES:
        raise ModuleFileError(f"module syntax {syntax!r} is not one of {', '.join(SYNTAXES)}")
