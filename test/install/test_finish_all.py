"""install.background.finish_all waits for every check that runs in a thread before it reports."""

from __future__ import annotations

import pytest
from easybuild.tools.build_log import EasyBuildError

from torchstack.install.background import finish_all


def test_every_finisher_runs_and_all_failures_are_reported() -> None:
    called = []

    def fails(name: str) -> None:
        called.append(name)
        raise EasyBuildError("torchstack: %s failed", name)

    with pytest.raises(EasyBuildError) as raised:
        finish_all([lambda: fails("libraries"), lambda: called.append("compile"),
                    lambda: fails("import")])
    assert called == ["libraries", "compile", "import"]
    assert str(raised.value) == "torchstack: libraries failed\ntorchstack: import failed"


def test_one_failure_is_raised_as_it_is() -> None:
    error = EasyBuildError("torchstack: %s", "only this")

    def fails() -> None:
        raise error

    with pytest.raises(EasyBuildError) as raised:
        finish_all([lambda: None, fails])
    assert raised.value is error


def test_nothing_failed() -> None:
    done: list[int] = []
    finish_all([lambda: done.append(1), lambda: done.append(2)])
    assert done == [1, 2]
