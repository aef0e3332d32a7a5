"""The PR gate, ``kvconform gate``: which connectors a vLLM change touches, and a verdict on them.

``command`` is the command line; ``repository`` and ``selection`` read the change
through git; ``overlay`` and ``tested_vllm`` decide which vLLM a run tests and prove
each test process imported it; ``suite_run`` (with ``held_run``) runs the suite over
it, ``results`` reads what each test did, ``judgement`` and ``base_comparison`` give
the verdict, ``printing`` says it; ``emitted_pipeline`` writes the Buildkite steps
instead.
"""
