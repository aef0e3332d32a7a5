"""What a run is, below everything that acts on it: its options, its target, the private APIs it may use, how
its workers take devices, its expectations (schema, vLLM conditions, lint findings, loading, matching), and
the loader of the YAML files it reads (``yaml_models``).

The pytest plugin's hooks (``plugin/``, ``reliability/``) resolve these once per session and act on them; the
connectors, the tools and the reports read them from here, so nothing imports the plugin package.
"""
