"""``kvconform mutate``: mutation testing of one connector, with the conformance suite as the oracle.

A mutant is one small change cosmic-ray's operators make to the connector's own code (``operators``,
``generate``); the conformance tests whose coverage reached its line (``reach``) run against it in a child
forked from a warm process that has imported vLLM and the suite once (``warm``, ``children``, ``runner``), with
the change swapped into the live function (``swap``). ``command`` is the command line; what a run found is
``kvconform.reports.mutants.MutationRun``.
"""
