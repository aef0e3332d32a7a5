"""The plugin's sibling modules (``pytest_plugins``), marked for assertion rewriting before any of them is imported.

pytest rewrites the asserts of the modules a plugin names in ``pytest_plugins``, marking
each as it loads it; one the plugin package had already imported by then
can no longer be rewritten, and pytest said so in every run
(``PytestAssertRewriteWarning: Module already imported``). A regular install is marked
whole before the plugin loads; an editable one lists no files, so pytest marks nothing
of it. The plugin package imports this module before its others: the marks come first,
through pytest's public ``register_assert_rewrite``, for either kind of install.
"""

from __future__ import annotations

import pytest

HOOK_MODULES = (
    "kvconform.conformance.plugin.preflight",
    "kvconform.conformance.plugin.expectations",
    "kvconform.conformance.plugin.results_json",
    "kvconform.conformance.plugin.coverage",
    "kvconform.conformance.reliability",
    "kvconform.conformance.plugin.workload_options",
    "kvconform.conformance.plugin.scheduler_option",
    "kvconform.conformance.connectors.services",
    "kvconform.conformance.reliability.host_lock",
    "kvconform.conformance.connectors.connector_env",
    "kvconform.conformance.reliability.gc_between_tests",
    "kvconform.conformance.plugin.console",
)

pytest.register_assert_rewrite(*HOOK_MODULES)
