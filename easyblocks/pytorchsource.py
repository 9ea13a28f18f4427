"""
EasyBuild support for PyTorch built from source, fingerprinted and guarded (torchstack stage 2).

EasyBuild's own EB_PyTorch does the build: its patches, options and test-suite checks are
upstream's, imported and never copied. This generic easyblock (easyblock = 'PyTorchSource', so
that it does not shadow EB_PyTorch) adds what PyTorchWheels adds to a wheel install, through
the same torchstack functions: the fingerprint file and whatis line, the provider half of the
swap guards in the module, and a sanity check that the libraries resolve and that the torch
built is the release (and CUDA) the easyconfig declares. Consumers built from source on top of
it (EB_torchvision, PythonPackage C++ extensions) record it through the hooks file.
"""
import os

from easybuild.easyblocks.pytorch import EB_PyTorch
from easybuild.framework.easyconfig import CUSTOM
from easybuild.tools.modules import get_software_version

from torchstack.install import libraries, steps


class PyTorchSource(EB_PyTorch):
    """PyTorch from source with EB_PyTorch, plus torchstack's fingerprint and swap guards."""

    torchstack_guards = True  # the hooks file leaves the guards of this easyblock's modules to it

    @staticmethod
    def extra_options(extra_vars=None):
        """Easyconfig parameters of PyTorchSource, beside those of EB_PyTorch."""
        extra_vars = EB_PyTorch.extra_options()
        extra_vars.update({
            'torchstack_abi_tag': [None, "abi_tag the built torch must show, e.g. torch-2.9.1-cxx11-cu12 "
                                   "(checked at sanity check)", CUSTOM],
        })
        return extra_vars

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fingerprint = None

    def post_processing_step(self):
        """Fingerprint the torch that was built and record it in the installation."""
        super().post_processing_step()
        self.fingerprint = steps.record_fingerprint(self)

    def sanity_check_step(self, *args, **kwargs):
        """Also: every shared object finds its libraries (resolved in a thread beside EasyBuild's
        checks); torch is the declared release and CUDA."""
        search_path = libraries.search_path(os.environ.get('LD_LIBRARY_PATH', ''), steps.dependency_roots(self))
        library_check = steps.start_library_check(self, search_path)
        try:
            steps.check_declared_torch(self.fingerprint, self.version, get_software_version('CUDA'),
                                       self.cfg['torchstack_abi_tag'])
            return super().sanity_check_step(*args, **kwargs)
        finally:
            steps.finish_library_check(self, library_check)

    def make_module_step(self, *args, **kwargs):
        """With eb --module-only nothing fingerprinted the installation: use what it recorded."""
        if self.fingerprint is None:
            self.fingerprint = steps.recorded_fingerprint(self)
        return super().make_module_step(*args, **kwargs)

    def make_module_extra(self, *args, **kwargs):
        """The provider half of the swap guards, after EB_PyTorch's environment."""
        return super().make_module_extra(*args, **kwargs) + steps.provider_module_extra(self, self.fingerprint)
