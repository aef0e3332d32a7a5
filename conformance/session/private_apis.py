"""Every private pytest or pytest-xdist name kvconform uses: each behind a feature test, with a public fallback.

kvconform is installed into other people's CI images beside whatever pytest, pytest-xdist and
pytest-timeout they pin, so it takes them as ranges; public APIs hold across those, a private name may
change in any release. So the plugin uses public ones (pytest's documented hooks and objects, xdist's
plugin hooks, ``workerinput`` and options), and the few private ones it keeps (for speed, or a report
pytest offers no public way to write) are listed in ``PRIVATE_USES``: each is used only where its feature
test passes; otherwise, or under ``--kvconform-public-apis-only``, the public fallback runs, keeping what
the self-tests prove at the cost the entry states. ``tests/install/test_public_apis.py`` fails on an
import of ``_pytest`` or a private xdist module that is not in this table.
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
