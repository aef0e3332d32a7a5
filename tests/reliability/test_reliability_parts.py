"""The reliability plugins' parts on their own: names from ids and exit codes, the
default-storage table, thread leak detection, and the load-failure check's model of vLLM's truncation."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from kvconform.conformance.checks.load_failure import kept_tokens
from kvconform.conformance.reliability.crashes import how_it_ended
from kvconform.conformance.reliability.storage import DEFAULT_STORAGE, DefaultStorage, default_storage, storage_table
from kvconform.conformance.reliability.threads import new_threads, still_running
from kvconform.reports.identity import connector_in_nodeid, parse_param_id


@pytest.mark.parametrize("nodeid,name", [
    ("test_roundtrip.py::test_roundtrip[cpu-CPU_ATTN-ExampleConnector-fp8]", "ExampleConnector"),
    ("test_lint.py::test_lint[cpu-MultiConnector]", "MultiConnector"),
    ("test_x.py::test_x[cpu-CPU_ATTN-ExampleConnectorX-fp8]", None),  # a whole parameter, not a substring
    ("test_x.py::test_plain", None),
    ("test_x.py::test_x[cuda-TRITON_ATTN-NixlConnector@device-buffer-fp8]", "NixlConnector@device-buffer"),
    ("test_x.py::test_x[cuda-TRITON_ATTN-NixlConnector@device-buffer]", "NixlConnector@device-buffer"),
])
def test_the_connector_is_found_among_a_test_ids_parameters(nodeid, name):
    names = ["ExampleConnector", "MultiConnector", "NixlConnector", "NixlConnector@device-buffer"]
    assert connector_in_nodeid(nodeid, names) == name


def test_the_reports_and_the_reliability_plugins_read_a_variant_id_alike():
    """One parser: a profile variant's id holds a dash, and the variant after it is the test's own."""
    names = ["NixlConnector", "NixlConnector@device-buffer"]
    assert parse_param_id("cpu-CPU_ATTN-NixlConnector@device-buffer-fp8", names) == {
        "platform": "cpu", "backend": "CPU_ATTN", "connector": "NixlConnector@device-buffer", "variant": "fp8"}
    assert parse_param_id("cpu-CPU_ATTN-NixlConnector-fp8", names)["connector"] == "NixlConnector"


@pytest.mark.parametrize("code,words", [(-11, "killed by SIGSEGV"), (-9, "killed by SIGKILL"), (3, "exit status 3"),
                                        (-200, "killed by signal 200"), (None, None)])
def test_how_a_worker_ended(code, words):
    assert how_it_ended(code) == words


def _connector(name, wraps=(), third_party=False, cls=None):
    return SimpleNamespace(name=name, class_name=name, is_third_party=third_party,
                           profile=SimpleNamespace(wraps=list(wraps)), load_class=lambda: cls)


def test_default_storage_follows_wrappers_and_base_classes(tmp_path):
    table = storage_table([f"MyConnector {tmp_path} kv-[0-9]+"])
    example = DEFAULT_STORAGE["ExampleConnector"]
    assert default_storage(table, _connector("ExampleConnector")) == example
    assert default_storage(table, _connector("MultiConnector", wraps=["ExampleConnector"])) == example

    class ExampleConnector:  # stands for vLLM's, by name: the table is keyed by class names
        pass

    class Subclass(ExampleConnector):
        pass

    assert default_storage(table, _connector("Subclass", third_party=True, cls=Subclass)) == example
    assert default_storage(table, _connector("MyConnector")) == (DefaultStorage(str(tmp_path), "kv-[0-9]+"),)
    assert default_storage(table, _connector("DecodeBenchConnector")) == ()


def test_only_entries_shaped_like_the_connectors_count(tmp_path):
    location = DefaultStorage(str(tmp_path), DEFAULT_STORAGE["ExampleConnector"][0].entry)
    for name in ("0123456789abcdef0123456789abcdef", "pytest-of-root", "tmpa065ns12", "0123456789abcdef",
                 "0123456789ABCDEF0123456789ABCDEF", "f" * 64):
        (tmp_path / name).mkdir()
    assert location.entries() == {"0123456789abcdef0123456789abcdef", "f" * 64}
    assert DefaultStorage(str(tmp_path / "missing"), ".*").entries() == set()


def test_threads_that_end_within_the_grace_period_are_not_leaks():
    before = set(threading.enumerate())
    stop = threading.Event()
    quick = threading.Thread(target=lambda: stop.wait(0.2), name="quick")
    stuck = threading.Thread(target=stop.wait, name="stuck", daemon=True)
    quick.start()
    stuck.start()
    born = new_threads(before)  # observed as a test's teardown ends, judged later (threads.py)
    try:
        assert born == [quick, stuck]
        assert still_running(born, grace_s=1.0) == [stuck]
    finally:
        stop.set()
        stuck.join()


@pytest.mark.parametrize("reported,kept", [
    (set(), 64),  # nothing reported: every claimed token counts as loaded
    ({13}, 48),  # the last block: the three before it stay
    ({10}, 0),  # the first block: nothing stays
    ({11, 13}, 16),  # the first reported block decides
    ({99}, 64),  # a block the request does not hold changes nothing
])
def test_the_check_keeps_what_vllm_keeps(reported, kept):
    """vLLM truncates a request's computed tokens at its first reported block (Scheduler._update_requests_...)."""
    assert kept_tokens([10, 11, 12, 13, 14], claimed=64, reported=reported, block_size=16) == kept
