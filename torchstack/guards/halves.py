"""Module guards: the Lua (Lmod) and Tcl text that refuses unsafe PyTorch loads and swaps.

The protocol (docs/design.rst, "The guard protocol"). Each half stands on its own: neither
relies on Lmod re-running a loaded consumer when its PyTorch is swapped (Lmod 8.6.19 does not,
nor does Lmod from 8.7.62 on).

- Provider half, in every PyTorch module (`provider_lua`, `provider_tcl`): on load it checks
  every registration in `TORCHSTACK_CONSUMERS` against its own abi tag and refuses with one
  error naming each consumer that cannot use it; then it sets `TORCHSTACK_TORCH_ABI` (its abi
  tag) and `TORCHSTACK_TORCH_MODULE` (its full module name).
- Consumer half, before `depends_on("PyTorch/...")` (`consumer_lua`, `consumer_tcl`): on load
  it refuses when `TORCHSTACK_TORCH_ABI` is set and does not fit, then registers with
  `prepend_path("TORCHSTACK_CONSUMERS", entry, ";")`, which unload reverses.

A registration entry is `<module>|<kind>|<payload>|<provider module>` (the names and formats
of `torchstack.guards.protocol`): `kind` is the link class, `payload` is
`<consumer abi tag>[,<clause>...]` and the fourth field names the torch module the consumer was
built with, so that a provider's refusal can say what to load instead. The guards only
evaluate (`EVALUATOR` of `torchstack.guards.lua` and `.tcl`): a payload without clauses
names the exact tag a cxx consumer needs, otherwise every clause must hold for the release,
C++ ABI and flavour parsed out of the provider tag `torch-<release>-<abi>-<flavour>`. The
clauses are those recorded with the consumer's fingerprint (`guard_clauses`), which
`compat.guard_clauses` derives from the rules: compat is the one place where rules become
clauses (docs/design.rst, "Guard clauses"; the halves: "The two halves").

On refusal Lmod (Lua `LmodError`, Tcl `error`, which Lmod's Tcl reader turns into LmodError)
aborts the whole command before it writes any change: the shell's environment, LOADEDMODULES
and every TORCHSTACK_* variable stay as they were, and `module` returns non-zero; a refused
Tcl module is never half loaded. Lmod also evaluates Tcl modulefiles in mode "load" for its
dependency check and `module refresh`; there the Tcl halves re-check the finished
environment, which the guards already kept safe.

Environment Modules 5 (modulecmd.tcl) rolls back a module whose evaluation raises `error`, and
prints the message alone for the errorCode the Tcl halves give (`tcl.ERROR_CODE`). Its
`module switch` and `module restore` go on after one refused module, though: the siteconfig.tcl
hook of `torchstack.guards.siteconfig` makes them all or nothing (`siteconfig_tcl`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint, Link
from torchstack.guards import lua, protocol, sitepackage, tcl
from torchstack.guards.lua import lua_string
from torchstack.guards.protocol import (
    CONSUMERS_VARIABLE,
    DELIMITER,
    FIELD_SEPARATOR,
    MODULE_VARIABLE,
    PROVIDER_VARIABLE,
)
from torchstack.guards.siteconfig import siteconfig_tcl
from torchstack.guards.tcl import tcl_string

# What Lmod's path handling would rewrite or split in an entry of CONSUMERS_VARIABLE
# (whitespace, '//', '.' components, a leading '~', a trailing '/'), and what Lmod's Tcl
# reader copies unescaped into Lua ('"', '\').
_UNSAFE_ENTRY = re.compile(rf'[\s{re.escape(DELIMITER)}"\\]|//|(?:^|/)\.(?:/|$)|^~|/$')

__all__ = [
    "CONSUMERS_VARIABLE",
    "MODULE_VARIABLE",
    "PROVIDER_VARIABLE",
    "GuardError",
    "Requirement",
    "consumer_lua",
    "consumer_tcl",
    "lua_string",
    "provider_lua",
    "provider_tcl",
    "registration",
    "requirement",
    "siteconfig_tcl",
    "sitepackage_lua",
    "specifier_clauses",
    "tcl_string",
]


class GuardError(TorchstackError):
    """A fingerprint, module name or requirement that a module guard cannot carry."""


@dataclass(frozen=True)
class Requirement:
    """What a consumer needs of the torch that is loaded, in the guards' terms."""

    kind: Link
    tag: str
    clauses: tuple[str, ...]

    @property
    def payload(self) -> str:
        return protocol.payload(self.tag, self.clauses)


def requirement(consumer: Fingerprint) -> Requirement:
    """The requirement a consumer registers: the guard clauses recorded with its fingerprint,
    else (a file that predates them, or a fingerprint just read) compat's, derived here once."""
    _expect_role(consumer, "consumer")
    clauses = consumer.guard_clauses
    if clauses is None:
        try:
            clauses = compat.guard_clauses(consumer)
        except compat.ClauseError as exc:
            raise GuardError(str(exc)) from exc
    return Requirement(consumer.link or "python", consumer.abi_tag, clauses)


def specifier_clauses(specifier: str) -> tuple[str, ...]:
    """A PEP 440 specifier as guard clauses (`compat.specifier_clauses`)."""
    try:
        return compat.specifier_clauses(specifier)
    except compat.ClauseError as exc:
        raise GuardError(str(exc)) from exc


def registration(consumer: Fingerprint, module: str, provider_module: str) -> str:
    """The consumer's entry in TORCHSTACK_CONSUMERS; GuardError if Lmod would alter it."""
    return _entry(consumer, requirement(consumer), module, provider_module)


def _entry(consumer: Fingerprint, need: Requirement, module: str, provider_module: str) -> str:
    fields = {"module": module, "provider module": provider_module, "abi tag": need.tag}
    problems = [f"{label} {value!r}" for label, value in fields.items()
                if not value or FIELD_SEPARATOR in value or _UNSAFE_ENTRY.search(value)]
    if protocol.CLAUSE_SEPARATOR in need.tag:
        problems.append(f"abi tag {need.tag!r}")
    if problems:
        raise GuardError(f"{_who(consumer)}: cannot register in {CONSUMERS_VARIABLE}: "
                         + ", ".join(problems))
    return protocol.entry(module, need.kind, need.payload, provider_module)


def provider_lua(fp: Fingerprint, module: str) -> str:
    """The provider half of a PyTorch module's Lua modulefile; `module` is its full name."""
    _expect_role(fp, "provider")
    return (
        "-- torchstack provider guard: refuse to load this torch while a loaded module\n"
        f"-- registered in {CONSUMERS_VARIABLE} cannot use it; tell consumers which is loaded.\n"
        "do\n"
        f"   local tag, name = {lua_string(fp.abi_tag)}, {lua_string(module)}\n"
        + lua.EVALUATOR + lua.PROVIDER + "end\n"
    )


def consumer_lua(fp: Fingerprint, module: str, provider_module: str) -> str:
    """The consumer half, to place before the modulefile's `depends_on(provider_module)`."""
    need = requirement(fp)
    entry = _entry(fp, need, module, provider_module)
    values = ", ".join(lua_string(v) for v in (module, need.kind, need.payload, provider_module))
    return (
        "-- torchstack consumer guard: refuse a loaded torch this module cannot use, then\n"
        f"-- register what it needs in {CONSUMERS_VARIABLE} for the torch modules loaded later.\n"
        "do\n"
        f"   local name, kind, payload, home = {values}\n"
        + lua.EVALUATOR + lua.CONSUMER
        + f"   prepend_path({lua_string(CONSUMERS_VARIABLE)}, {lua_string(entry)}, "
        f"{lua_string(DELIMITER)})\n"
        "end\n"
    )


def provider_tcl(fp: Fingerprint, module: str) -> str:
    """The provider half for a Tcl modulefile; a refusal is an `error` (see the module doc)."""
    _expect_role(fp, "provider")
    return (
        "# torchstack provider guard: refuse to load this torch while a loaded module\n"
        f"# registered in {CONSUMERS_VARIABLE} cannot use it; tell consumers which is loaded.\n"
        f"set torchstack_tag {tcl_string(fp.abi_tag)}\n"
        f"set torchstack_name {tcl_string(module)}\n"
        + tcl.EVALUATOR + tcl.PROVIDER
    )


def consumer_tcl(fp: Fingerprint, module: str, provider_module: str) -> str:
    """The consumer half for a Tcl modulefile, to place before its `depends-on`."""
    need = requirement(fp)
    entry = _entry(fp, need, module, provider_module)
    return (
        "# torchstack consumer guard: refuse a loaded torch this module cannot use, then\n"
        f"# register what it needs in {CONSUMERS_VARIABLE} for the torch modules loaded later.\n"
        f"set torchstack_name {tcl_string(module)}\n"
        f"set torchstack_kind {tcl_string(need.kind)}\n"
        f"set torchstack_payload {tcl_string(need.payload)}\n"
        f"set torchstack_home {tcl_string(provider_module)}\n"
        + tcl.EVALUATOR + tcl.CONSUMER
        + f"prepend-path -d {tcl_string(DELIMITER)} {CONSUMERS_VARIABLE} {tcl_string(entry)}\n"
    )


def sitepackage_lua() -> str:
    """A SitePackage.lua whose finalize hook refuses unsafe mixes site-wide (see its header)."""
    return (sitepackage.SITEPACKAGE_HEAD + lua.EVALUATOR
            + sitepackage.SITEPACKAGE_READER + sitepackage.SITEPACKAGE_BODY)


def _expect_role(fp: Fingerprint, role: str) -> None:
    if fp.role != role:
        raise GuardError(f"{_who(fp)} is a torch {fp.role}, not a {role}")


def _who(fp: Fingerprint) -> str:
    return f"{fp.name} {fp.version}"
