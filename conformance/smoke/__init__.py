"""``make smoke-accelerator``: the first run of kvconform on a machine with an accelerator.

Two parts, so a machine that has only torch still says something:

- ``torch_only``: platform detection, the pinning of xdist workers to one device
  each, and the device guard on real device tensors (no vLLM needed);
- a bounded conformance run (``select`` keeps the first case of each check per
  connector: one value per axis) of ExampleConnector, DecodeBenchConnector, the
  NIXL pair and MultiConnector, with JUnit and JSON results.

Everything lands in one folder. Run as ``python -P -m kvconform.conformance.smoke --out DIR``
(``-P``: the installed kvconform, not a source tree in the working directory).
"""
