"""Thin on purpose: kvconform's plugin is registered by its ``pytest11`` entry point
(so ``pytest --pyargs kvconform.conformance`` works from anywhere once installed). Only when
entry-point plugins are disabled does this file load it for a source checkout."""

import os

if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
    pytest_plugins = ["kvconform.conformance.plugin"]
