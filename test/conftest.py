"""Session fixtures shared by the whole suite: the real torch wheels of this machine, real eb.

The wheels come through this machine's pip configuration (`pip download --no-deps`), are cached
across sessions under $TORCHSTACK_CACHE (default ~/.cache/torchstack), and are installed once
with `pip install --no-deps --target` for tests that need installed trees (support/wheelcache.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import schedule
from support.cudastack import IN_PYTHON_MODULE, download_stack, write_site_modules
from support.ebenv import EasyBuildEnv, make_python_root, wheel_easyconfig
from support.ebmodules import PYTORCH_CUDA, WHEELS, beyond_module, consumer_module, stage_wheels
from support.emenv import EnvModulesEnv
from support.extension_src import build_extension_wheel
from support.wheelbuild import build_wheel, sha256
from support.wheelcache import REAL_WHEELS, cache_dir, cache_lock, download_wheel, install_tree

# What makes a test `slow`: the real eb and Lmod (eb_env), the real torch wheels (real_wheel,
# through real_tree too), torch 2.14.1 with its nvidia wheels (cuda_stack), the Slurm cluster,
# and module trees run through the real Lmod (a test module that holds LMOD_INIT, the init
# script every Lmod run sources). Marked by what a test uses, directly or through other
# fixtures, rather than by hand, so that no such test is forgotten.
SLOW_FIXTURES = frozenset({"eb_env", "real_wheel", "cuda_stack", "slurm_cluster"})


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker appends the groups to the ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        drives_lmod = hasattr(getattr(item, "module", None), "LMOD_INIT")
        if drives_lmod or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: what it runs, in which units
        schedule.group_and_order(items, schedule.load(cache_dir() / schedule.RECORD))


# The controller of a pytest-xdist run measures each test (setup, call and teardown) for the
# order of the next run's units (support/schedule.py).
_measured: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    key = schedule.plain_id(report.nodeid)
    _measured[key] = _measured.get(key, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    distributed = session.config.getoption("dist", "no") != "no"
    if distributed and not hasattr(session.config, "workerinput") and _measured:
        schedule.save(cache_dir() / schedule.RECORD, _measured.items())


@pytest.fixture(scope="session")
def real_wheel() -> object:
    """Factory: real_wheel("torch-2.13.0") -> Path of the cached real wheel."""
    return lambda key: download_wheel(REAL_WHEELS[key])


@pytest.fixture(scope="session")
def real_tree(real_wheel: object) -> object:
    """Factory: real_tree("torch-2.13.0") -> site-packages with that wheel installed."""
    return lambda key: install_tree(real_wheel(key))  # type: ignore[operator]


# -- real EasyBuild and Lmod ----------------------------------------------------------------


@pytest.fixture(scope="session")
def eb_env(tmp_path_factory: pytest.TempPathFactory) -> EasyBuildEnv:
    """One EasyBuild install path with a Python module, shared by the session."""
    if not Path("/usr/share/lmod/lmod/libexec/lmod").exists():
        pytest.fail("Lmod is not installed: run scripts/setup (apt-get install lmod)")
    root = tmp_path_factory.mktemp("easybuild")
    with cache_lock("pyroot"):
        python_root = make_python_root(cache_dir())
    return EasyBuildEnv(root, python_root).setup()


@pytest.fixture(scope="session")
def pytorch_cpu_module(eb_env: EasyBuildEnv, real_wheel: object) -> str:
    """PyTorch/2.13.0-whl installed by the real eb from the real torch-2.13.0+cpu wheel."""
    wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
    eb_env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(
        eb_env.root / "PyTorch-2.13.0-whl.eb", "PyTorch", "2.13.0",
        [("torch", "2.13.0+cpu", wheel, sha256(wheel))],
    )
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return "PyTorch/2.13.0-whl"


@pytest.fixture(scope="session")
def toy_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pure-Python consumer that imports torch and requires torch>=2.13."""
    code = b"import torch\n\ndef double(x):\n    return torch.as_tensor(x) * 2\n"
    return build_wheel(tmp_path_factory.mktemp("toy"), "torchtoy", "1.0",
                       {"torchtoy/__init__.py": code}, requires=("torch>=2.13",))


@pytest.fixture(scope="session")
def demo_ext_wheel(eb_env: EasyBuildEnv, real_tree: object) -> Path:
    """A real C++ extension built against torch 2.13.0+cpu (cached across sessions)."""
    with cache_lock("demo-ext"):
        return build_extension_wheel(cache_dir(), eb_env.python_root / "bin" / "python",
                                     real_tree("torch-2.13.0"))  # type: ignore[operator]


@pytest.fixture(scope="session")
def toy_module(eb_env: EasyBuildEnv, pytorch_cpu_module: str, toy_wheel: Path) -> str:
    """torchtoy as a module on PyTorch 2.13.0."""
    return consumer_module(eb_env, toy_wheel, "torchtoy", "1.0")


@pytest.fixture(scope="session")
def demo_ext_module(eb_env: EasyBuildEnv, pytorch_cpu_module: str, demo_ext_wheel: Path) -> str:
    """The C++ extension as a module on PyTorch 2.13.0."""
    return consumer_module(eb_env, demo_ext_wheel, "torchstack_demo_ext", "0.1")


@pytest.fixture(scope="session")
def cuda_stack() -> dict[str, Path]:
    """torch 2.14.1 and every wheel it pins, by project name (about 3 GB, cached)."""
    with cache_lock("cuda-stack"):
        return download_stack(cache_dir() / "cuda-stack")


@pytest.fixture(scope="session")
def cuda_modules(eb_env: EasyBuildEnv, cuda_stack: dict[str, Path]) -> list[tuple[str, str]]:
    """Stand-in CUDA, cuDNN, NCCL, cuSPARSELt and NVSHMEM site modules with the real libraries
    (made once per machine); their (name, version)."""
    return write_site_modules(eb_env.site_modules, cuda_stack)


@pytest.fixture(scope="session")
def cuda_wheels_module(eb_env: EasyBuildEnv, cuda_stack: dict[str, Path]) -> str:
    """PyTorch 2.14.1 with every pinned nvidia wheel, cuda_libs = 'wheels' (about 5 GB)."""
    wheels = [w for name, w in sorted(cuda_stack.items()) if name not in IN_PYTHON_MODULE]
    easyconfig = wheel_easyconfig(
        eb_env.root / "PyTorch-2.14.1-CUDA-13.0-whl.eb", "PyTorch", "2.14.1",
        stage_wheels(eb_env, "PyTorch", wheels), versionsuffix="-CUDA-13.0-whl",
        extra="cuda_libs = 'wheels'\n",
    )
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return "PyTorch/2.14.1-CUDA-13.0-whl"


@pytest.fixture(scope="session")
def torchvision_stable_module(eb_env: EasyBuildEnv, cuda_wheels_module: str,
                              real_wheel: object) -> str:
    """torchvision 0.29.1 (stable ABI, CUDA 13) as a module on PyTorch 2.14.1."""
    wheel = real_wheel("torchvision-0.29.1")  # type: ignore[operator]
    return consumer_module(eb_env, wheel, "torchvision", "0.29.1", [PYTORCH_CUDA])


# -- real EasyBuild and Environment Modules 5 ------------------------------------------------
# The same stack as above, installed by eb with --modules-tool=EnvironmentModules
# --module-syntax=Tcl into an install path of its own (modulecmd.tcl reads no Lua).


@pytest.fixture(scope="session")
def em_env(tmp_path_factory: pytest.TempPathFactory) -> EnvModulesEnv:
    """One EasyBuild install path for Environment Modules, with a Tcl Python module."""
    if not Path("/usr/share/modules/init/bash").exists():
        pytest.fail("Environment Modules is not installed: run scripts/setup "
                    "(apt-get install environment-modules)")
    root = tmp_path_factory.mktemp("easybuild-em")
    with cache_lock("pyroot"):
        python_root = make_python_root(cache_dir())
    return EnvModulesEnv(root, python_root).setup()


def _em_torch(em_env: EnvModulesEnv, wheels: list[Path], version: str, suffix: str,
              extra: str = "") -> str:
    easyconfig = wheel_easyconfig(
        em_env.root / f"PyTorch-{version}{suffix}.eb", "PyTorch", version,
        stage_wheels(em_env, "PyTorch", wheels), versionsuffix=suffix, extra=extra)
    result = em_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return f"PyTorch/{version}{suffix}"


@pytest.fixture(scope="session")
def em_torch(em_env: EnvModulesEnv, real_wheel: object,
             cuda_stack: dict[str, Path]) -> dict[str, str]:
    """PyTorch 2.13.0+cpu (twice: same abi tag) and 2.14.1 (CUDA 13 wheels) as Tcl modules."""
    cpu = real_wheel("torch-2.13.0")  # type: ignore[operator]
    cuda = [w for name, w in sorted(cuda_stack.items()) if name not in IN_PYTHON_MODULE]
    return {"cpu": _em_torch(em_env, [cpu], "2.13.0", "-whl"),
            "copy": _em_torch(em_env, [cpu], "2.13.0", "-copy-whl"),
            "cuda": _em_torch(em_env, cuda, "2.14.1", "-CUDA-13.0-whl",
                              "cuda_libs = 'wheels'\n")}


@pytest.fixture(scope="session")
def em_consumers(em_env: EnvModulesEnv, em_torch: dict[str, str], real_wheel: object,
                 demo_ext_wheel: Path, toy_wheel: Path) -> dict[str, str]:
    """Every consumer of the Lmod matrix as a Tcl module, by the keys of swapmatrix's calls."""
    vision = real_wheel("torchvision-0.29.1")  # type: ignore[operator]
    found = {"ext": consumer_module(em_env, demo_ext_wheel, "torchstack_demo_ext", "0.1"),
             "toy": consumer_module(em_env, toy_wheel, "torchtoy", "1.0"),
             "vision": consumer_module(em_env, vision, "torchvision", "0.29.1",
                                       [PYTORCH_CUDA])}
    for key, (wheel, name, version, modulename) in WHEELS.items():
        found[key] = beyond_module(em_env, real_wheel(wheel),  # type: ignore[operator]
                                   name, version, modulename)
    return found
