"""A pytest plugin for ``test_anchored_checked.py``: generated consumer requests that cannot load, and a record.

Loaded into a conformance run with ``-p tests.workload.fresh_consumers``, it makes
every consumer request the workload generator draws a prompt of its own (a family
no other request has), so no generated workload can give the consumer a load
except through the anchored workload's first consumer request, which the
generator builds itself; and it appends each workload's claimed and verified
tokens, one JSON line per workload, to the file ``RECORD_ENV`` names.
"""

from __future__ import annotations

import itertools
import json
import os

import pytest

RECORD_ENV = "KVCONFORM_TEST_WORKLOAD_RECORD"
FRESH_FAMILIES = 1_000  # above the generator's families, below the occupants' (workload/run.py)


def pytest_configure(config: pytest.Config) -> None:
    from kvconform.conformance.workload import run, strategies
    from kvconform.conformance.workload.spec import RequestSpec

    families = itertools.count(FRESH_FAMILIES)

    def fresh_request(draw, bases):
        length = draw.integer(2, strategies.MAX_PROMPT)
        arrive = draw.integer(0, 3)
        return RequestSpec(family=next(families), length=length, arrive=arrive, max_tokens=draw.integer(1, 6))

    real_run = run.run_workload

    def recorded_run(rig, spec):
        report = real_run(rig, spec)
        with open(os.environ[RECORD_ENV], "a") as record:
            record.write(json.dumps({"connector": rig.connector.name, "label": spec.label,
                                     "consumer_lengths": [r.length for r in spec.consumer],
                                     "claimed": report.claimed_tokens,
                                     "verified": report.verified_loaded_tokens}) + "\n")
        return report

    patch = pytest.MonkeyPatch()
    patch.setattr(strategies, "_consumer_request", fresh_request)
    patch.setattr(run, "run_workload", recorded_run)
    config.add_cleanup(patch.undo)
