"""
EasyBuild support for installing PyTorch and its ecosystem from the official wheels.

PythonBundle does the fetching, checksum verification and module environment; this
easyblock installs all wheels in one fast, parallel step, checks that they fit the Python
and the host, and records the torchstack fingerprint of the result. Every decision is made
by the torchstack library; this file is glue.
"""
import os
import platform
from pathlib import Path

from easybuild.easyblocks.generic.pythonbundle import PythonBundle
from easybuild.framework.easyconfig import CUSTOM
from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.filetools import remove
from easybuild.tools.modules import get_software_root, get_software_version
from easybuild.tools.run import run_shell_cmd

from torchstack import (
    TorchstackError,
    compat,
    cudalibs,
    installation,
    installcheck,
    installer,
    jitcheck,
    modulefile,
    record,
    wheeltags,
)
from torchstack.distributions import importable_top_level

CUDA_LIBS_CHOICES = ('wheels', 'modules')


class PyTorchWheels(PythonBundle):
    """Install torch, torchvision, torchaudio, triton, ... from wheels, fingerprinted."""

    torchstack_guards = True  # the hooks file leaves the guards of this easyblock's modules to it

    @staticmethod
    def extra_options(extra_vars=None):
        """Easyconfig parameters of PyTorchWheels, beside those of PythonBundle."""
        extra_vars = PythonBundle.extra_options(extra_vars)
        extra_vars.update({
            'cuda_libs': ['wheels', "Where torch's pinned CUDA libraries come from: "
                          "'wheels' (nvidia-* wheels in exts_list) or 'modules' (dependencies)", CUSTOM],
        })
        return extra_vars

    def __init__(self, *args, **kwargs):
        """Check easyconfig parameters before anything is fetched."""
        super().__init__(*args, **kwargs)
        if self.cfg['cuda_libs'] not in CUDA_LIBS_CHOICES:
            raise EasyBuildError("torchstack: cuda_libs = %r is not one of %s",
                                 self.cfg['cuda_libs'], ', '.join(CUDA_LIBS_CHOICES))
        if self.cfg['cuda_libs'] == 'modules':
            wheels = cudalibs.wheel_projects(ext[0] for ext in self.cfg['exts_list'] if isinstance(ext, tuple))
            if wheels:
                raise EasyBuildError("torchstack: cuda_libs = 'modules' installs no CUDA wheels, but exts_list has %s",
                                     ', '.join(wheels))
        self.fingerprint = None
        self.import_names = []

    def install_all_extensions(self, install=True):
        """Install every wheel at once with the fast installer; anything else as PythonBundle does."""
        wheels = [ext for ext in self.ext_instances if str(getattr(ext, 'src', '')).endswith('.whl')]
        if not install or self.dry_run or not wheels:
            super().install_all_extensions(install=install)
            return
        self._check_wheel_tags(ext.src for ext in wheels)
        # One import of everything the wheels install at sanity check, instead of one python
        # (and one import of torch) per extension.
        explicit = {e[0] for e in self.cfg['exts_list'] if len(e) > 2 and 'modulename' in e[2]}
        for ext in wheels:
            if ext.name not in explicit:
                self.import_names.extend(importable_top_level(Path(ext.src)))
                ext.options['modulename'] = False
        cuda_plan = self._cuda_modules_plan([ext.src for ext in wheels])
        cmd = installer.install_command(self.python_cmd, self.installdir, [ext.src for ext in wheels])
        self.log.info("Installing %d wheels with one command", len(wheels))
        try:
            run_shell_cmd(' '.join(cmd))
        finally:
            remove(installer.leftovers(self.installdir))
        for line in cudalibs.write_stand_ins(Path(self.installdir) / self.pylibdir, cuda_plan):
            self.log.info("torchstack: %s", line)
        others = [ext for ext in self.ext_instances if ext not in wheels]
        if others:
            all_instances, self.ext_instances = self.ext_instances, others
            try:
                super().install_all_extensions(install=install)
            finally:
                self.ext_instances = all_instances

    def _check_wheel_tags(self, paths):
        """Refuse wheels built for another Python or another architecture."""
        pyver = tuple(int(x) for x in get_software_version('Python').split('.')[:2])
        misfits = wheeltags.misfits(paths, pyver, platform.machine())
        if misfits:
            raise EasyBuildError("torchstack: wheel does not fit: %s", '; '.join(misfits))

    def post_processing_step(self):
        """Fingerprint the installation and check its consumers against the torch they run on."""
        super().post_processing_step()
        try:
            self.fingerprint = installation.examine(self.installdir, get_software_root('PyTorch')).fingerprint
        except TorchstackError as err:
            raise EasyBuildError("torchstack: %s", err) from err
        if self.fingerprint is not None:
            record.write_fingerprint(self.installdir, self.fingerprint)
            self.cfg['whatis'] = (self.cfg['whatis'] or []) + [record.whatis_line(self.fingerprint)]

    def _cuda_modules_plan(self, paths):
        """With cuda_libs = 'modules': which dependency module satisfies each CUDA pin of torch."""
        if self.cfg['cuda_libs'] != 'modules':
            return []
        provided = {}
        for dep in self.cfg.dependencies():
            root = get_software_root(dep['name'])
            if root:
                provided[dep['name']] = cudalibs.Provided(dep['name'], get_software_version(dep['name']), Path(root))
        pyver = '.'.join(get_software_version('Python').split('.')[:2])
        try:
            return cudalibs.plan_for_wheels(paths, pyver, platform.machine(), provided)
        except TorchstackError as err:
            raise EasyBuildError("torchstack: %s", err) from err

    def sanity_check_step(self, *args, **kwargs):
        """Also: every loadable shared object finds its libraries; torch is what was declared."""
        self._check_libraries_resolve()
        self._check_declared_torch()
        commands = list(kwargs.get('custom_commands') or [])
        if self.import_names:
            commands.append("%s -c 'import %s'" % (self.python_cmd, ', '.join(self.import_names)))
        if self._has_cxx_compiler() and self.fingerprint is not None:
            commands.append("%s %s" % (self.python_cmd, jitcheck.write_script(self.builddir)))
        kwargs['custom_commands'] = commands
        super().sanity_check_step(*args, **kwargs)

    def _has_cxx_compiler(self):
        """A toolchain with a compiler: a tiny torch C++ extension is built with it at sanity check."""
        return not self.toolchain.is_system_toolchain() and bool(self.toolchain.comp_family())

    def _check_libraries_resolve(self):
        roots = [get_software_root(dep['name']) for dep in self.cfg.dependencies()]
        search_path = installcheck.search_path(os.environ.get('LD_LIBRARY_PATH', ''), [r for r in roots if r])
        site_packages = [os.path.join(r, self.pylibdir) for r in [self.installdir, get_software_root('PyTorch')] if r]
        failures, notes = installcheck.unresolved_libraries(self.installdir, search_path, site_packages)
        for note in notes:
            self.log.warning("torchstack: optional plugin does not resolve: %s", note)
        if failures:
            raise EasyBuildError("torchstack: shared libraries do not resolve:\n%s", '\n'.join(failures[:20]))

    def _check_declared_torch(self):
        if self.fingerprint is None or self.fingerprint.role != 'provider':
            return
        torch_exts = [e for e in self.cfg['exts_list'] if isinstance(e, tuple) and e[0] == 'torch']
        declared_cuda = get_software_version('CUDA') if self.cfg['cuda_libs'] == 'modules' else None
        problems = compat.disagreements(self.fingerprint, torch_exts[0][1], declared_cuda) if torch_exts else []
        if problems:
            raise EasyBuildError("torchstack: %s", '; '.join(problems))

    def make_module_dep(self, *args, **kwargs):
        """The consumer half of the swap guards goes before the dependency on PyTorch."""
        txt = super().make_module_dep(*args, **kwargs)
        torch_module = modulefile.torch_module(self.cfg.dependencies())
        if self.fingerprint is None or self.fingerprint.role != 'consumer' or torch_module is None:
            return txt
        try:
            return modulefile.guard_module_text(txt, self.fingerprint, self.full_mod_name, torch_module,
                                                self.module_generator.SYNTAX)
        except TorchstackError as err:
            raise EasyBuildError("torchstack: %s", err) from err

    def make_module_extra(self, *args, **kwargs):
        """The provider half of the swap guards, in every module that installs torch itself."""
        txt = super().make_module_extra(*args, **kwargs)
        if self.fingerprint is not None and self.fingerprint.role == 'provider':
            txt += modulefile.provider_block(self.fingerprint, self.full_mod_name, self.module_generator.SYNTAX)
        return txt
