"""
EasyBuild support for installing PyTorch and its ecosystem from the official wheels.

PythonBundle does the fetching, checksum verification and module environment; this
easyblock installs all wheels in one fast, parallel step, checks that they fit the Python
and the host, and records the torchstack fingerprint of the result. With cuda_libs = 'modules'
on sites whose modules set no LD_LIBRARY_PATH (eb --rpath), it writes the CUDA modules' library
folders into the RPATH of the installed libraries (cuda_libs_rpath, see torchstack.install.runpath).
Every decision is made by the torchstack library; this file is glue.
"""
import os
import platform
from pathlib import Path

from easybuild.easyblocks.generic.pythonbundle import PythonBundle
from easybuild.framework.easyconfig import CUSTOM
from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.config import build_option
from easybuild.tools.modules import get_software_root, get_software_version
from easybuild.tools.run import run_shell_cmd

from torchstack import TorchstackError, cudalibs, wheeltags
from torchstack.distributions import importable_top_level
from torchstack.install import background, libraries, pthsearch, runpath, steps
from torchstack.install.wheels import install_command

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
            'torchstack_abi_tag': [None, "abi_tag the installed torch must show, as torchstack generate "
                                   "predicted it (checked at sanity check)", CUSTOM],
            'cuda_libs_rpath': [None, "With cuda_libs = 'modules': write the dependency modules' library "
                                "folders into the RPATH of the installed libraries, for modules that set no "
                                "LD_LIBRARY_PATH (None: follow eb --rpath)", CUSTOM],
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
        if self.cfg['cuda_libs_rpath'] and self.cfg['cuda_libs'] != 'modules':
            raise EasyBuildError("torchstack: cuda_libs_rpath = True needs cuda_libs = 'modules', not %r",
                                 self.cfg['cuda_libs'])
        self.fingerprint = None
        self.background = background.BackgroundWork(self)  # byte-compile, checks: beside the steps
        self._pth_searches = None

    def run_all_steps(self, *args, **kwargs):
        """Also: the background work that no step waited for, because a step failed (or eb
        --stop), is stopped (on a failure) or waited for when the steps end."""
        with self.background:
            return super().run_all_steps(*args, **kwargs)

    def install_all_extensions(self, install=True):
        """Install every wheel at once with the fast installer; anything else as PythonBundle does."""
        wheels = [ext for ext in self.ext_instances if str(getattr(ext, 'src', '')).endswith('.whl')]
        if not install or self.dry_run or not wheels:
            super().install_all_extensions(install=install)
            return
        self._check_wheel_tags(ext.src for ext in wheels)
        # One import of everything the wheels install at sanity check, instead of one python
        # (and one import of torch) per extension, beside the rest of the sanity check.
        explicit = {e[0] for e in self.cfg['exts_list'] if len(e) > 2 and 'modulename' in e[2]}
        for ext in wheels:
            if ext.name not in explicit:
                self.background.will_import(importable_top_level(Path(ext.src)))
                ext.options['modulename'] = False
            # What each extension's own install would have probed (prepare_python): without it,
            # its sanity check runs five Python and shell probes a wheel (bench/README.rst).
            ext.python_cmd, ext.pylibdir, ext.all_pylibdirs = self.python_cmd, self.pylibdir, self.all_pylibdirs
        cuda_plan = self._cuda_modules_plan([ext.src for ext in wheels])
        cmd = install_command(self.python_cmd, self.installdir, [ext.src for ext in wheels])
        self.log.info("Installing %d wheels with one command", len(wheels))
        try:
            run_shell_cmd(' '.join(cmd))
        finally:
            # Deleted while the installation is checked; joined at the end of the sanity check.
            self.background.start_cache_removal()
        # Byte-compiled while the installation is checked and the module written; waited for
        # at the permissions step, which must see every file.
        self.background.start_bytecode_compile()
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
        """RPATH to the CUDA modules if asked; fingerprint; check consumers against their torch."""
        super().post_processing_step()
        if self._rpath_cuda_libs():
            self._rewrite_rpath()
        self.fingerprint = steps.record_fingerprint(self)

    def _rpath_cuda_libs(self):
        """cuda_libs_rpath, which follows eb --rpath unless the easyconfig sets it."""
        wanted = self.cfg['cuda_libs_rpath']
        if wanted is None:
            wanted = bool(build_option('rpath'))
        return wanted and self.cfg['cuda_libs'] == 'modules'

    def _rewrite_rpath(self):
        library_dirs = libraries.module_library_dirs(steps.dependency_roots(self, runtime_only=True))
        try:
            rewrites = runpath.rewrite_tree(self.installdir, library_dirs)
        except TorchstackError as err:
            raise EasyBuildError("torchstack: %s", err) from err
        for rewrite in rewrites:
            self.log.info("torchstack: %s of %s: %s", rewrite.tag, rewrite.path, ':'.join(rewrite.after))

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
        """Also: every loadable shared object finds its libraries (resolved in a thread beside
        EasyBuild's checks); torch is what was declared; one import of all the wheels install
        (beside EasyBuild's checks once the module is loaded); with a compiler in the
        toolchain, a C++ extension builds against torch (also beside EasyBuild's checks)."""
        # The files are in place: from here PythonBundle searches them for .pth files once
        # (on the EasyBuild releases torchstack's search was tested with).
        self._pth_searches = pthsearch.store(self.log)
        self.background.start_checks(self._library_search_path(),
                                     extension=self._has_cxx_compiler() and self.fingerprint is not None)
        try:
            self._check_declared_torch()
            super().sanity_check_step(*args, **kwargs)
        finally:
            self.background.finish_checks()

    def sanity_check_load_module(self, *args, **kwargs):
        """Also: once the module is loaded, start the one import of all the wheels install."""
        fake_mod_data = super().sanity_check_load_module(*args, **kwargs)
        if self.sanity_check_module_loaded:
            self.background.start_import_check()
        return fake_mod_data

    def permissions_step(self):
        """Also: wait for the byte-compile first, so that its files get the installation's
        permissions (it runs beside the sanity check and the module step); then EasyBuild's
        step, reading the installation once instead of six times."""
        self.background.finish_bytecode_compile()
        steps.adjust_permissions(self, super().permissions_step)

    def _has_cxx_compiler(self):
        """A toolchain with a compiler: a tiny torch C++ extension is built with it at sanity check."""
        return not self.toolchain.is_system_toolchain() and bool(self.toolchain.comp_family())

    def _library_search_path(self):
        """With the CUDA modules in the RPATH, without LD_LIBRARY_PATH or the modules' folders."""
        if self._rpath_cuda_libs():
            return []
        return libraries.search_path(os.environ.get('LD_LIBRARY_PATH', ''), steps.dependency_roots(self))

    def _check_declared_torch(self):
        torch_exts = [e for e in self.cfg['exts_list'] if isinstance(e, tuple) and e[0] == 'torch']
        declared_cuda = get_software_version('CUDA') if self.cfg['cuda_libs'] == 'modules' else None
        steps.check_declared_torch(self.fingerprint, torch_exts[0][1] if torch_exts else None, declared_cuda,
                                   self.cfg['torchstack_abi_tag'])

    def make_module_step(self, *args, **kwargs):
        """With eb --module-only nothing fingerprinted the installation: use what it recorded."""
        if self.fingerprint is None:
            self.fingerprint = steps.recorded_fingerprint(self)
        return super().make_module_step(*args, **kwargs)

    def make_module_req(self, *args, **kwargs):
        """A module that installs torch itself: CMAKE_PREFIX_PATH, LD_LIBRARY_PATH and LIBRARY_PATH
        for libtorch (find_package(Torch), linking C++ programs), as upstream's -whl easyconfigs do."""
        steps.add_libtorch_module_paths(self, self.fingerprint)
        return super().make_module_req(*args, **kwargs)

    def make_module_dep(self, *args, **kwargs):
        """The consumer half of the swap guards goes before the dependency on PyTorch."""
        return steps.consumer_module_dep(self, super().make_module_dep(*args, **kwargs), self.fingerprint)

    def make_module_extra(self, *args, **kwargs):
        """The provider half of the swap guards, in every module that installs torch itself;
        from the sanity check on, PythonBundle's search for .pth files is done once."""
        if self._pth_searches is None:
            txt = super().make_module_extra(*args, **kwargs)
        else:
            with pthsearch.searched_once(self._pth_searches):
                txt = super().make_module_extra(*args, **kwargs)
        return txt + steps.provider_module_extra(self, self.fingerprint)
