"""The real-module stand of the venv tests, shared by the modules that use it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ebenv import EasyBuildEnv
from support.venvstand import Stand, venv_stand


@pytest.fixture(scope="package")
def stand(eb_env: EasyBuildEnv, pytorch_cpu_module: str, toy_wheel: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    with venv_stand(eb_env, toy_wheel, tmp_path_factory.mktemp("index-wheels"),
                    tmp_path_factory.mktemp("home")) as made:
        yield made
