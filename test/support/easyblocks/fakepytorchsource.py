"""
PyTorchSource for the small libtorch of test/support/fakelibtorch.py: only PyTorch's test suite
is stubbed.

Everything else runs as for a real source build: EB_PyTorch's configure step (its build options
and custom_opts, passed as environment variables to the build), PythonPackage's `pip install .`
of the source tree, which compiles libc10, libtorch_cpu and torch._C with g++, EB_PyTorch's and
PythonPackage's sanity checks (import torch, pip check, no downloaded dependencies) and all of
PyTorchSource: fingerprint, recorded file, whatis line, library and declared-version checks,
provider guard in the module.

Overridden, because it needs the real PyTorch tree:
- test_step: EB_PyTorch runs test/run_test.py of the PyTorch sources and parses its output and
  XML reports (and refuses `runtest = False`); the small tree has no test suite. The stub keeps
  what EB_PyTorch builds on, PythonPackage's test step (a test install into a temporary
  folder, as EB_PyTorch's `testinstall = True` asks), and runs a smoke test there instead.
"""
from easybuild.easyblocks.generic.pythonpackage import PythonPackage
from easybuild.easyblocks.generic.pytorchsource import PyTorchSource

# From / : in the source folder, `import torch` would find the unbuilt torch/ of the tree.
SMOKE_TEST = "cd / && %(python)s -c \"import torch; assert torch.op_schema('add') == 'aten::add'\""


class FakePyTorchSource(PyTorchSource):
    """PyTorchSource whose test step is a smoke test of the built torch."""

    def test_step(self):
        """Test-install the torch just built and call into its libtorch_cpu."""
        self.cfg['runtest'] = SMOKE_TEST
        return PythonPackage.test_step(self)
