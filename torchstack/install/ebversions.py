"""The EasyBuild releases that torchstack's replacements inside EasyBuild were tested with.

install.permissions and install.pthsearch replace a name inside one of EasyBuild's modules for
one step (fenced: the call checked against the signature, anything else passed to EasyBuild's
own function, the name restored in `finally`). What they stand in for is EasyBuild's code, which
any release may change without a word. So each is made only on the releases of the EasyBuild
package holding that name that are listed here, those on which its tests passed: its own tests
against EasyBuild's function (test/install/test_permissions.py, test_pthsearch.py) and the real
eb of test/install/test_easyblock_wheels.py. On any other release EasyBuild's own code runs and
the easyblock says so once in the installation's log; nothing else changes but the time taken.

Adding a release: run those tests under it (they make the replacement on any release) and add
the release here; test/install/test_ebversions.py fails until the installed one is listed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

# Where each EasyBuild package states its release (as the first line of EasyBuild's log does).
VERSION_MODULES = {"easybuild-framework": "easybuild.tools.version",
                   "easybuild-easyblocks": "easybuild.easyblocks"}


@dataclass(frozen=True)
class Replacement:
    """A name torchstack replaces inside EasyBuild, and the releases it was tested with."""

    what: str  # the name and where it lives, as the log line says it
    package: str  # the EasyBuild package whose module holds that name
    tested: tuple[str, ...]


PERMISSIONS = Replacement("adjust_permissions of the permissions step (install.permissions)",
                          "easybuild-framework", ("5.0.0", "5.4.1"))
# EasyBuild 5.0.0's PythonBundle does not search for .pth files: nothing to replace there.
PTHSEARCH = Replacement("search_file of PythonBundle's module file (install.pthsearch)",
                        "easybuild-easyblocks", ("5.4.1",))


def installed(package: str) -> str:
    """The installed release of the EasyBuild `package`, as EasyBuild states it."""
    return str(importlib.import_module(VERSION_MODULES[package]).VERSION)


def fallback(replacement: Replacement) -> str | None:
    """Why `replacement` is not made on the installed EasyBuild; None when it is."""
    release = installed(replacement.package)
    if release in replacement.tested:
        return None
    return (f"torchstack: EasyBuild's own {replacement.what} runs: {replacement.package} "
            f"{release} is not a release it was tested with ({', '.join(replacement.tested)})")


def replacing(replacement: Replacement, log: Any) -> bool:
    """Whether to make `replacement`; when not, one line in `log` (EasyBuild's logger of the
    running easyblock) says so and why. Call it once per installation."""
    reason = fallback(replacement)
    if reason is not None:
        log.info("%s", reason)
    return reason is None
