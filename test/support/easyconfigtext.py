"""The text of small easyconfigs that tests write: one builder of the parameters they all open with.

EasyBuild requires name, version, homepage, description and toolchain in every easyconfig, and
moduleclass is written last by convention (as `eb --check-contrib` and upstream files have it);
what a test wants of its own (sources, dependencies, postinstallcmds, ...) is the `body`.
"""

from __future__ import annotations

import textwrap

SYSTEM = ("system", "system")  # EasyBuild's SYSTEM toolchain, written as `SYSTEM`


def easyconfig_text(name: str, version: str, toolchain: tuple[str, str] = SYSTEM, *,
                    easyblock: str | None = "ConfigureMake", versionsuffix: str = "",
                    homepage: str = "https://example.org/", description: str = "",
                    body: str = "", moduleclass: str = "tools") -> str:
    """An easyconfig of `name` `version` on `toolchain` (name, version); `body` is dedented and
    goes between the header and moduleclass. No easyblock line where `easyblock` is None."""
    tc = "SYSTEM" if toolchain == SYSTEM else repr(dict(zip(("name", "version"), toolchain)))
    head = [f"easyblock = {easyblock!r}"] if easyblock else []
    head += [f"name = {name!r}", f"version = {version!r}", f"versionsuffix = {versionsuffix!r}",
             f"homepage = {homepage!r}",
             f'description = "{description or f"{name} (torchstack test)"}"',
             f"toolchain = {tc}"]
    return "\n".join(head) + "\n" + textwrap.dedent(body) + f"\nmoduleclass = {moduleclass!r}\n"
