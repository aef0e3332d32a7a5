"""tests/shared_run/keywords.py selects what pytest's own ``-k`` selects, and refuses what it refuses."""

from __future__ import annotations

import pytest

from tests.shared_run.keywords import KeywordError, check, item_names, matches

pytest_plugins = ["pytester"]

TOY = '''
import pytest

@pytest.mark.slow
@pytest.mark.parametrize("size", ["bs32", "bs16-unaligned", "bs32-unaligned"])
def test_roundtrip_scenario(size):
    pass

def test_contract_worker():
    pass
test_contract_worker.tagged = True

class TestPair:
    @pytest.mark.parametrize("connector", ["NixlConnector", "Broken[x]"])
    def test_pull(self, connector):
        pass
'''

EXPRESSIONS = ["roundtrip", "test_roundtrip_scenario and unaligned and bs32", "ROUNDTRIP and not unaligned",
               "slow", "tagged", "TestPair", "(pull or contract) and not Broken", "not (slow or tagged)",
               "test_toy", "Broken[x]", "scenario or", "nothing_like_it", ""]


def _collected(pytester, *args: str) -> list[pytest.Item]:
    recorder = pytester.inline_run("--collect-only", "-p", "no:cacheprovider", *args)
    (call,) = recorder.getcalls("pytest_collection_finish")
    return list(call.session.items)


@pytest.mark.parametrize("expression", [e for e in EXPRESSIONS if e != "scenario or"])
def test_the_same_tests_as_pytests_k(pytester, expression):
    pytester.makepyfile(test_toy=TOY)
    every = _collected(pytester)
    theirs = [item.nodeid for item in _collected(pytester, "-k", expression)]
    assert [item.nodeid for item in every if matches(expression, item_names(item))] == theirs
    assert theirs or expression == "nothing_like_it"


@pytest.mark.parametrize("expression", ["scenario or", "(a and b", "and", "a )", "a & b"])
def test_what_pytest_refuses_is_refused(expression):
    with pytest.raises(KeywordError, match="-k"):
        check(expression)
