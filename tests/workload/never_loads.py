"""A connector that stores as vLLM's ExampleConnector does and never claims a hit: it never loads.

The generated workload test must fail it saying nothing was checked, however its
workloads were drawn (``test_anchored_checked.py``); its profile, with no promised
hit, is ``never_loads.yaml`` beside this file.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class NeverLoadsConnector(ExampleConnector):
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False
