"""kvconform: the conformance suite and CI harness for vLLM's KV connectors.

Installed, the repository's four folders are this package's four subpackages
(pyproject.toml maps each folder to its name), so nothing generic such as
``conformance`` or ``reports`` lands at the top of site-packages:

- ``kvconform.platforms``: which platform this is, its devices and attention backends;
- ``kvconform.conformance``: the pytest plugin, the harness and the checks
  (``pytest --pyargs kvconform.conformance``);
- ``kvconform.pipelines``: Buildkite pipelines and the PR gate;
- ``kvconform.reports``: results.json, summary.md and index.html.
"""
