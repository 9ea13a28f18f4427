"""The guard protocol: the names and formats that Python, the Lua text and the Tcl text share
(docs/design.rst, "The guard protocol").

Module guards talk through the environment and the fingerprint file: a provider half sets
PROVIDER_VARIABLE (its abi tag) and MODULE_VARIABLE (its module), a consumer half registers
itself in CONSUMERS_VARIABLE, and the SitePackage hook reads FINGERPRINT_FILE under a loaded
module's root. A registration is the fields `<module>|<kind>|<payload>|<provider module>`
(FIELD_SEPARATOR), entries are joined by DELIMITER, and a payload is `<abi tag>[,<clause>...]`
(CLAUSE_SEPARATOR; the clauses are compat's, `torchstack.fingerprint.compat.guard_clauses`).

The Lua and Tcl texts name these through `@NAME@` placeholders that `fill` replaces, so the
protocol is written down once, here. Neither language treats the separators as special where
they are filled in (Lua patterns, Tcl `split` and a Tcl regular expression after a backslash).
"""

from __future__ import annotations

import re
from pathlib import Path

PROVIDER_VARIABLE = "TORCHSTACK_TORCH_ABI"
MODULE_VARIABLE = "TORCHSTACK_TORCH_MODULE"
CONSUMERS_VARIABLE = "TORCHSTACK_CONSUMERS"
DELIMITER = ";"
FIELD_SEPARATOR = "|"
CLAUSE_SEPARATOR = ","
FINGERPRINT_FILE = Path("easybuild") / "torchstack-fingerprint.json"

PLACEHOLDERS = {
    "PROVIDER_VARIABLE": PROVIDER_VARIABLE,
    "MODULE_VARIABLE": MODULE_VARIABLE,
    "CONSUMERS_VARIABLE": CONSUMERS_VARIABLE,
    "DELIMITER": DELIMITER,
    "FIELD_SEPARATOR": FIELD_SEPARATOR,
    "CLAUSE_SEPARATOR": CLAUSE_SEPARATOR,
    "FINGERPRINT_FILE": FINGERPRINT_FILE.as_posix(),
}
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def fill(text: str, extra: dict[str, str] | None = None) -> str:
    """`text` with every `@NAME@` replaced by the protocol's value (or `extra`'s).

    A placeholder without a value is a programming error, so it raises KeyError at import time
    of the module that holds the text, never in a user's modulefile.
    """
    values = {**PLACEHOLDERS, **(extra or {})}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def entry(module: str, kind: str, payload: str, provider_module: str) -> str:
    """One registration in CONSUMERS_VARIABLE (the caller checks the fields first)."""
    return FIELD_SEPARATOR.join((module, kind, payload, provider_module))


def payload(tag: str, clauses: tuple[str, ...]) -> str:
    """The requirement a registration carries: the consumer's abi tag, then its clauses."""
    return CLAUSE_SEPARATOR.join((tag, *clauses))
