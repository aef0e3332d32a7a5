"""benchmarks/gate_timing.py's input checks (its timings are measured, not tested: see the README)."""

from __future__ import annotations

import pytest

from tests.bench.conftest import benchmark_script


@pytest.fixture(scope="module")
def gate_timing():
    with benchmark_script("gate_timing.py") as module:
        yield module


@pytest.mark.parametrize(("argv", "message"), [
    (["--rounds", "0"], "--rounds: at least 1, not 0"),
    (["--file", "vllm/no_such_connector.py"], "--file: vllm/no_such_connector.py is not a file of the installed vLLM"),
])
def test_bad_input_is_a_usage_error_before_any_checkout_is_built(gate_timing, argv, message, capsys, monkeypatch):
    monkeypatch.setattr(gate_timing, "make_checkout", lambda *args: pytest.fail("built a checkout for bad input"))
    with pytest.raises(SystemExit) as exit_info:
        gate_timing.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_default_change_is_a_connector_file_of_the_installed_vllm(gate_timing):
    assert (gate_timing.VLLM_SOURCE.parent / gate_timing.DEFAULT_FILE).is_file()
