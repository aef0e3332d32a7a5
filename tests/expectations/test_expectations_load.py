"""Loading and matching expectation entries, without a pytest session."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from kvconform.conformance.connectors.profiles import PROFILES_FILE
from kvconform.conformance.session.expectation_loading import (
    EXPECTATIONS_DIR,
    ExpectationError,
    load_expectations,
    load_file,
)
from kvconform.conformance.session.expectation_matching import decide
from kvconform.conformance.session.expectation_schema import Entry, check_link, raised_as
from kvconform.conformance.session.yaml_models import FAST_SAFE_LOADER, safe_load_yaml
from kvconform.reports.identity import Identity

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
    entries = [e for e in load_expectations([EXPECTATIONS_DIR]) if e.platform in ("cpu", "any")]
    for connector, expected in (("ExampleConnector", True), ("MultiConnector", True), ("OffloadingConnector", False)):
        identity, nodeid = _identity(connector, "aligned-extend-bs32")
        nodeid = nodeid.replace("::test_roundtrip[", "::test_roundtrip_scenario[")
        entry = decide(entries, identity, nodeid)
        assert (entry is not None) is expected, connector
        if entry is not None:
            assert entry.entry.expect == "xfail"
            assert "FileNotFoundError" in entry.entry.reason
            assert (entry.entry.raises, entry.entry.finding_class, entry.platform) == (
                "FileNotFoundError", "bug", "any")
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
            class: bug
            raises: KeyError
            match: layer
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
            class: policy
            raises: RuntimeError
            match: broad
    """)
    entries = load_file(path)
    exempt, nodeid = _identity("ExampleConnector", "float16-bs16")
    assert decide(entries, exempt, nodeid).entry.expect == "pass"
    broad, nodeid = _identity("ExampleConnector", "float16-bs32")
    assert decide(entries, broad, nodeid).entry.expect == "xfail"
    other_check, nodeid = _identity("MultiConnector", "x", check="fill")
    assert decide(entries, other_check, nodeid).entry.reason == "broad"


PINNED = "    class: bug\n    raises: KeyError\n    match: layer\n"


@pytest.mark.parametrize(("body", "message"), [
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://github.com/vllm-project/vllm/issues\n"
     + PINNED, "is not specific: link one issue"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://github.com/vllm-project/vllm\n"
     + PINNED, "is not specific"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://github.com/vllm-project/vllm/pulls\n"
     + PINNED, "is not specific"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/\n" + PINNED,
     "must be an http(s) URL"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/1\n",
     "needs class and raises and match"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/1\n    class: bug\n"
     "    raises: KeyError\n", "needs match"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/1\n    class: bad\n"
     "    raises: KeyError\n    match: x\n", "class: Input should be 'bug', 'policy' or 'hazard'"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/1\n    class: bug\n"
     "    raises: Exception\n    match: x\n", "Exception matches any failure"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/1\n    class: bug\n"
     "    raises: not a name\n    match: x\n", "is not an exception class name"),
    ("  - connector: A\n    expect: xfail\n    reason: r\n    link: https://example.org/1\n    class: bug\n"
     "    raises: KeyError\n    match: '(unclosed'\n", "not a regular expression"),
], ids=["issues-listing", "repository", "pulls-listing", "bare-host", "unpinned", "no-match", "bad-class",
        "too-broad", "bad-raises", "bad-regex"])
def test_an_xfail_must_pin_its_failure_class_and_a_specific_link(tmp_path, body, message):
    path = _write(tmp_path, "platform: cpu\nexpectations:\n" + body)
    with pytest.raises(ExpectationError) as info:
        load_file(path)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("link", [
    "https://github.com/vllm-project/vllm/issues/42924",
    "https://github.com/vllm-project/vllm/pull/51806",
    "https://github.com/vllm-project/vllm/pull/51806/files",
    "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/simple_kv_offload/worker.py#L165",
    "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/a.py#L10-L12",
    "https://github.com/vllm-project/vllm/commit/0123abc",
    "https://docs.vllm.ai/en/latest/features/disagg_prefill.html",
])
def test_specific_links_are_accepted(link):
    assert check_link(link) == link


def test_source_file_without_a_line_is_not_specific():
    with pytest.raises(ValueError, match="not specific"):
        check_link("https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/kv_transfer/"
                   "kv_connector/v1/nixl/__init__.py")


def _entry(raises: str, match: str) -> Entry:
    return Entry.model_validate({"connector": "A", "expect": "xfail", "reason": "r", "link": "https://example.org/1",
                                 "class": "bug", "raises": raises, "match": match})


def test_an_attribute_error_entry_does_not_absorb_a_key_error():
    entry = _entry("AttributeError", "priority_range")
    assert entry.mismatch("call", AttributeError("type object 'Stream' has no attribute 'priority_range'")) is None
    why = entry.mismatch("call", KeyError("model.layers.0.self_attn.attn"))
    assert why is not None and "KeyError" in why and "AttributeError" in why


def test_the_message_must_match_too():
    entry = _entry("AttributeError", "priority_range")
    why = entry.mismatch("call", AttributeError("'NoneType' object has no attribute 'device'"))
    assert why is not None and "does not match 'priority_range'" in why


def test_a_setup_error_is_never_the_expected_failure():
    entry = _entry("AttributeError", "priority_range")
    why = entry.mismatch("setup", AttributeError("type object 'Stream' has no attribute 'priority_range'"))
    assert why is not None and "failed in setup" in why


def test_raises_names_a_class_or_any_base_bare_or_qualified():
    error = FileNotFoundError("no such file")
    assert raised_as(error, "FileNotFoundError") and raised_as(error, "OSError")
    assert raised_as(error, "builtins.FileNotFoundError")
    assert not raised_as(error, "KeyError")


def test_every_shipped_xfail_pins_its_failure_and_has_a_class():
    entries = load_expectations([EXPECTATIONS_DIR])
    xfails = [e for e in entries if e.entry.expect == "xfail"]
    assert xfails
    for e in xfails:
        assert e.entry.finding_class in ("bug", "policy", "hazard"), e.where
        assert e.entry.raises and (e.entry.match or e.entry.findings), e.where


def test_no_shipped_expectation_depends_on_a_line_number():
    """A line moves with every edit above it and between vLLM releases: lint entries pin findings
    (rule, file, function, call), and no message an entry matches names a source line."""
    entries = load_expectations([EXPECTATIONS_DIR, EXPECTATIONS_DIR / "thirdparty"])
    lint = [e for e in entries if e.entry.test and "test_lint[" in e.entry.test]
    assert lint and all(e.entry.findings and e.entry.match is None for e in lint), [e.where for e in lint]
    pinned_lines = [e.where for e in entries if e.entry.match and re.search(r"\.py:\d", e.entry.match)]
    assert not pinned_lines


@pytest.mark.parametrize("path", [PROFILES_FILE, *sorted(EXPECTATIONS_DIR.rglob("*.yaml"))], ids=lambda p: p.name)
def test_the_shipped_files_read_as_pyyaml_reads_them(path):
    """profiles.py parses with libyaml where PyYAML has it: each shipped file gives PyYAML's own document."""
    text = path.read_text()
    assert safe_load_yaml(text) == yaml.safe_load(text)
    assert yaml.__with_libyaml__ is False or FAST_SAFE_LOADER is yaml.CSafeLoader
