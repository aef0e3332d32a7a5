"""Loading and matching expectation entries, without a pytest session."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conformance.expectations import EXPECTATIONS_DIR, ExpectationError, decide, load_expectations, load_file
from reports.identity import Identity

ROUNDTRIP_ID = "conformance/test_roundtrip.py::test_roundtrip[cpu-CPU_ATTN-{connector}-{variant}]"


def _write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _identity(connector: str, variant: str, check: str = "roundtrip") -> tuple[Identity, str]:
    param_id = f"cpu-CPU_ATTN-{connector}-{variant}"
    return (Identity(check=check, platform="cpu", backend="CPU_ATTN", connector=connector, variant=variant,
                     param_id=param_id), ROUNDTRIP_ID.format(connector=connector, variant=variant))


def test_shipped_cpu_file_xfails_the_aligned_extend_bug_for_example_and_multi_connector():
    entries = [e for e in load_expectations([EXPECTATIONS_DIR]) if e.platform == "cpu"]
    for connector, expected in (("ExampleConnector", True), ("MultiConnector", True), ("OffloadingConnector", False)):
        identity, nodeid = _identity(connector, "aligned-extend")
        entry = decide(entries, identity, nodeid)
        assert (entry is not None) is expected, connector
        if entry is not None:
            assert entry.entry.expect == "xfail"
            assert "FileNotFoundError" in entry.entry.reason
            assert entry.entry.link.startswith("https://github.com/vllm-project/vllm/")
    identity, nodeid = _identity("ExampleConnector", "float16-bs16")
    assert decide(entries, identity, nodeid) is None


def test_entries_point_at_their_own_line(tmp_path):
    path = _write(tmp_path, """
        platform: cpu
        expectations:
          - connector: A
            expect: skip
            reason: r

          - check: fill
            expect: xfail
            reason: r
            link: https://example.org/1
    """)
    entries = load_file(path)
    assert [e.where.rsplit(":", 1)[1] for e in entries] == ["3", "7"]
    assert all(e.platform == "cpu" for e in entries)


@pytest.mark.parametrize(("body", "line", "message"), [
    ("  - connector: A\n    expect: xfail\n    reason: r\n", 3, "expectations.0: expect: xfail needs link"),
    ("  - connector: A\n    expect: skip\n", 3, "expectations.0: expect: skip needs reason"),
    ("  - connector: A\n    reason: r\n    tset: typo\n", 5, "expectations.0.tset: Extra inputs are not permitted"),
    ("  - connector: A\n  - connector: B\n    expect: xfail\n    reason: r\n    link: not-a-url\n", 7,
     "expectations.1.link: Value error, must be an http(s) URL"),
    ("  - expect: pass\n", 3, "expectations.0: an entry needs at least one of: test, connector, check, backend"),
    ("  - connector: A\n    expect: maybe\n", 4, "expectations.0.expect: Input should be 'pass', 'xfail' or 'skip'"),
], ids=["xfail-without-link", "skip-without-reason", "unknown-key", "bad-link", "no-selector", "bad-expect"])
def test_malformed_entry_is_one_line_naming_file_line_and_key(tmp_path, body, line, message):
    path = _write(tmp_path, "platform: cpu\nexpectations:\n" + body)
    with pytest.raises(ExpectationError) as info:
        load_file(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: ") or text.startswith(f"{Path('exp.yaml')}:{line}: ")
    assert message.replace("Value error, ", "") in text


def test_malformed_file_level_problems(tmp_path):
    cases = {
        "platform: tpu\n": "platform: Value error, unknown platform 'tpu'",
        "expectations: []\n": "platform: Field required",
        "platform: cpu\nexpectations: [\n": "not valid YAML",
        "platform: cpu\nentries: []\n": "entries: Extra inputs are not permitted",
    }
    for index, (text, message) in enumerate(cases.items()):
        path = _write(tmp_path, text, f"bad{index}.yaml")
        with pytest.raises(ExpectationError, match=None) as info:
            load_file(path)
        assert str(path.name) in str(info.value) and message in str(info.value), str(info.value)


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(ExpectationError, match="no such expectations file or folder"):
        load_expectations([tmp_path / "absent.yaml"])


def test_test_selector_matches_node_id_or_parametrize_id_exactly_or_by_glob(tmp_path):
    identity, nodeid = _identity("ExampleConnector", "float16-bs16")
    selectors = {
        nodeid: True,  # exact node id, brackets and all
        identity.param_id: True,  # exact parametrize id
        "*ExampleConnector*bs16*": True,
        "*test_roundtrip[cpu-*-ExampleConnector-*]": True,  # brackets are literal, not a character class
        "*test_roundtrip[c]*": False,
        "cpu-CPU_ATTN-ExampleConnector": False,  # exact means whole
        "*MultiConnector*": False,
    }
    for selector, expected in selectors.items():
        path = _write(tmp_path, f"platform: cpu\nexpectations:\n  - test: '{selector}'\n")
        assert (decide(load_file(path), identity, nodeid) is not None) is expected, selector


def test_all_given_selectors_must_match_and_the_first_matching_entry_decides(tmp_path):
    path = _write(tmp_path, """
        platform: cpu
        expectations:
          - connector: ExampleConnector
            check: fill
            expect: skip
            reason: never, the check differs
          - connector: Example*
            backend: CPU_ATTN
            test: "*bs16*"
            expect: pass
          - connector: "*Connector"
            expect: xfail
            reason: broad
            link: https://example.org/1
    """)
    entries = load_file(path)
    exempt, nodeid = _identity("ExampleConnector", "float16-bs16")
    assert decide(entries, exempt, nodeid).entry.expect == "pass"
    broad, nodeid = _identity("ExampleConnector", "float16-bs32")
    assert decide(entries, broad, nodeid).entry.expect == "xfail"
    other_check, nodeid = _identity("MultiConnector", "x", check="fill")
    assert decide(entries, other_check, nodeid).entry.reason == "broad"
