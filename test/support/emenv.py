"""A real EasyBuild + Environment Modules 5 environment, beside the Lmod one of ebenv.py.

Debian's environment-modules (modulecmd.tcl) reads Tcl module files only, so this environment
has its own install path, a Tcl Python module, and eb runs with
`--modules-tool=EnvironmentModules --module-syntax=Tcl`. Its shells source Modules' init
script instead of Lmod's, with torchstack's siteconfig.tcl hook named in MODULES_SITECONFIG as
a site would install it (`hooked=False`: the module files' guards alone).
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

from support.ebenv import PYTHON_VERSION, EasyBuildEnv
from torchstack.guards.siteconfig import siteconfig_tcl

MODULES_INIT = Path("/usr/share/modules/init/bash")
MODULES_HOME = Path("/usr/share/modules")
MODULES_CMD = Path("/usr/lib/x86_64-linux-gnu/modulecmd.tcl")
# what a Tcl error that Modules did not expect prints after its message
TCL_TRACE = ("while executing", "invoked from within")


@dataclass
class EnvModulesEnv(EasyBuildEnv):
    """EasyBuildEnv for Environment Modules: Tcl modules, modulecmd.tcl in eb and shells."""

    hooked: bool = True

    @property
    def siteconfig(self) -> Path:
        return self.root / "siteconfig.tcl"

    def setup(self) -> EnvModulesEnv:
        for path in (self.installpath, self.sourcepath, self.site_modules / "Python"):
            path.mkdir(parents=True, exist_ok=True)
        (self.site_modules / "Python" / PYTHON_VERSION).write_text(textwrap.dedent(f"""\
            #%Module
            module-whatis "Python {PYTHON_VERSION} (torchstack test stand-in)"
            setenv EBROOTPYTHON {self.python_root}
            setenv EBVERSIONPYTHON {PYTHON_VERSION}
            prepend-path PATH {self.python_root / 'bin'}
            """))
        self.siteconfig.write_text(siteconfig_tcl())
        return self

    def without_hook(self) -> EnvModulesEnv:
        """The same installation, its shells without the siteconfig hook."""
        return dataclasses.replace(self, hooked=False)

    def environ(self, shared_uv_cache: bool = False) -> dict[str, str]:
        env = {k: v for k, v in super().environ(shared_uv_cache).items()
               if not k.startswith(("LMOD", "__MODULES", "MODULES_"))}
        env.update(MODULES_CMD=str(MODULES_CMD), MODULESHOME=str(MODULES_HOME),
                   EASYBUILD_MODULES_TOOL="EnvironmentModules", EASYBUILD_MODULE_SYNTAX="Tcl")
        if self.hooked:
            env["MODULES_SITECONFIG"] = str(self.siteconfig)
        return env

    def shell(self, script: str) -> subprocess.CompletedProcess[str]:
        """Run bash with Environment Modules initialised (and the hook unless unhooked)."""
        full = f"source {shlex.quote(str(MODULES_INIT))}\nset -e\n{script}\n"
        return subprocess.run(["bash", "-c", full], env=self.environ(), capture_output=True,
                              text=True, cwd=self.root, check=False)
