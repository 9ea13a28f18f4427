"""EasyBuild hooks file: `eb --hooks "$(torchstack hooks-path)" ...`.

Gives installations made by any easyblock (EB_PyTorch, PythonBundle `-whl` easyconfigs,
EB_torchvision, ...) what the torchstack easyblocks give theirs: after post-processing, an
installation that contains torch or depends on it is fingerprinted, its consumers are checked
against the torch they run on, and the fingerprint is recorded; when the module file is
written, the provider or consumer half of the swap guards goes into it. Installations without
torch are left untouched.
"""

from easybuild.tools.build_log import EasyBuildError

from torchstack import TorchstackError
from torchstack.guards import modulefile
from torchstack.install import steps

ATTRIBUTE = 'torchstack_fingerprint'


def post_postproc_hook(self, *args, **kwargs):
    """Fingerprint the installation; refuse consumers that do not fit the torch under them."""
    if getattr(self, 'torchstack_guards', False):  # a torchstack easyblock does it itself
        return
    setattr(self, ATTRIBUTE, steps.record_fingerprint(self, any_easyblock=True))


def module_write_hook(self, filepath, module_txt, *args, **kwargs):
    """Add the guard half that the recorded fingerprint calls for; None leaves the text as is."""
    if getattr(self, 'torchstack_guards', False):  # a torchstack easyblock writes its own
        return None
    if not hasattr(self, ATTRIBUTE):
        # eb --module-only runs no post-processing: the module is written again from what
        # the installation recorded before
        setattr(self, ATTRIBUTE, steps.recorded_fingerprint(self, any_easyblock=True))
    fingerprint = getattr(self, ATTRIBUTE)
    if fingerprint is None:
        return None
    try:
        return modulefile.guard_module_text(module_txt, fingerprint, self.short_mod_name,
                                            modulefile.torch_module(self.cfg.dependencies()),
                                            self.module_generator.SYNTAX)
    except TorchstackError as err:
        raise EasyBuildError("torchstack: %s", err) from err
