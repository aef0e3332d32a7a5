"""Every private pytest or pytest-xdist name kvconform uses: each behind a feature test, with a public fallback.

Why: kvconform is a pytest plugin installed into other people's CI images, beside
whatever pytest, pytest-xdist and pytest-timeout those pin, so it takes them as
ranges (pytest 8.3 on, pytest-xdist 3.5 on) rather than exact versions. Public APIs
hold across those; a private name may change in any release. So the plugin uses
public ones, and the few private ones it keeps (for speed, or a report pytest
offers no public way to write) are listed in ``PRIVATE_USES``: each is used only
where its feature test passes, and otherwise, or under
``--kvconform-public-apis-only``, the public fallback runs, which keeps what the
self-tests prove and costs only what the entry says.
``tests/install/test_public_apis.py`` reads kvconform's modules and fails on an
import of ``_pytest`` or of a private xdist module that is not in this table.

The public APIs used: pytest's documented hooks and objects (``pytest.CallInfo``,
``pytest.TestReport``, ``pytest.CollectReport``, ``pytest.StashKey``, the
``pytest_runtest_*`` hooks called through ``item.ihook``) and xdist's plugin
hooks (``pytest_xdist_make_scheduler`` with a scheduler written to its contract,
``pytest_configure_node``, ``pytest_testnodedown``, ``pytest_handlecrashitem``,
``pytest_xdist_auto_num_workers``), its ``workerinput`` and its options.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

PUBLIC_ONLY_DEST = "kvconform_public_apis_only"  # --kvconform-public-apis-only (options.py)


@dataclass(frozen=True)
class PrivateUse:
    name: str  # the private name
    user: str  # the kvconform module that uses it
    imports: str | None  # the private module it imports, if it imports one (what the ast test allows)
    feature_test: str  # what must hold for it to be used
    fallback: str  # what runs otherwise, and what that costs


PRIVATE_USES = (
    PrivateUse(
        name="_pytest.junitxml.xml_key", user="kvconform.conformance.plugin.results_json", imports="_pytest.junitxml",
        feature_test="importable, and what pytest stashes under it has add_global_property()",
        fallback="the JUnit file has no kvconform.run.* suite properties: a report read from JUnit alone "
                 "takes the platform from the test ids and leaves the versions unknown (results.json has them)"),
    PrivateUse(
        name="xdist WorkerInteractor.item_index", user="kvconform.conformance.reliability.held_reports", imports=None,
        feature_test="xdist's worker plugin holds an int item_index that is the index of the test being run",
        fallback="an xdist worker waits at the end of each test for the shutdowns it left running in the "
                 "background, instead of letting them run on beside the connector's next test (up to a "
                 "second per P/D pair test)"),
    PrivateUse(
        name="execnet gateway._io.popen (a dead xdist worker's process)",
        user="kvconform.conformance.reliability.crashes", imports=None,
        feature_test="the attributes exist and the process's wait() gives its return code",
        fallback="a crash is described by the first line of xdist's error (not \"killed by SIGSEGV\")"),
)


def public_only(config: pytest.Config) -> bool:
    """Whether the user asked for the public fallbacks (``--kvconform-public-apis-only``)."""
    return bool(config.getoption(PUBLIC_ONLY_DEST, False))
