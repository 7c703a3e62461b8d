"""The executor's allow-list of `transform.python` modules, and its flag."""

from __future__ import annotations

import pytest

from lockgate.executor.__main__ import main
from lockgate.executor.dataplane.transform_modules import EXAMPLE_TRANSFORM_MODULES, module_allowed


def test_a_prefix_allows_itself_and_its_submodules_only() -> None:
    assert module_allowed("acme.transforms", ["acme.transforms"])
    assert module_allowed("acme.transforms.orders", ["other", "acme.transforms"])
    assert not module_allowed("acme.transformsevil", ["acme.transforms"])
    assert not module_allowed("acme", ["acme.transforms"])
    assert not module_allowed("os", [])
    assert module_allowed("lockgate.executor.examples.transforms", EXAMPLE_TRANSFORM_MODULES)


@pytest.mark.parametrize("prefix", ["", ".acme", "acme.", "acme/transforms", "acme.1x"])
def test_a_prefix_that_is_not_a_module_name_is_refused_at_start(
    prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--id", "e1", "--coordinator", "127.0.0.1:1", "--allow-transform-module", prefix])
    assert exited.value.code == 2
    assert f"--allow-transform-module {prefix!r}: write a dotted module name" in (
        capsys.readouterr().err
    )
