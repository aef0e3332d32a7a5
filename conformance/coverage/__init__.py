"""Connector coverage (``--kvconform-coverage``): which source files are measured, whose they are, and the numbers.

``scope`` says which files a run measures and which are each connector's own (found without importing
them, so measuring can start before vLLM loads); ``measure`` turns coverage.py's data into the results'
``coverage`` section. ``floor.yaml`` is the committed floor ``kvconform report --coverage-floor`` checks.
"""
