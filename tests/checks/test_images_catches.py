"""The image round-trip fails a connector whose key leaves the images out, and only that check does.

One suite run drives the unmodified ExampleConnector and tests/checks/images_broken.py's copy through the
image round-trip and the round-trips without images (an unaligned prompt; several requests in one step): the copy
fails the first, naming the request that got another image's KV, and passes the others (its key is right
for prompts without images), so no other round-trip catches it; vLLM's own passes all.
"""

from __future__ import annotations

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

BROKEN = "ImageBlindKeyConnector"
WORDS = ["ImageBlindKeyConnector claimed", "external tokens for image-y", "equal those of image-x stored before",
         "its key leaves the image's hash out"]
SELECT = "test_images or (test_roundtrip_scenario and bs32 and (unaligned or multi))"


RUN = SelfTestRun.of_broken(SELECT, "ExampleConnector", "tests.checks.images_broken", [BROKEN])


images_run = results_of(RUN)


def test_unmodified_example_connector_passes(images_run):
    _, outcomes, output = images_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert any("::test_images[" in o.nodeid for o in mine), output[-3000:]
    assert mine and all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


def test_image_roundtrip_catches_the_image_blind_key(images_run):
    returncode, outcomes, output = images_run
    assert returncode == 1, output[-3000:]
    failed = [o for o in of_connector(outcomes, BROKEN) if o.outcome != "passed"]
    assert [o.nodeid.split("::")[-1].split("[")[0] for o in failed] == ["test_images"], \
        [(o.nodeid, o.outcome, o.message[:800]) for o in failed]
    for word in WORDS:
        assert word in failed[0].message, (word, failed[0].message[:1500])


def test_other_roundtrips_pass_the_image_blind_key(images_run):
    _, outcomes, _ = images_run
    others = [o for o in of_connector(outcomes, BROKEN) if "::test_images[" not in o.nodeid]
    assert len(others) == 2 and all(o.outcome == "passed" for o in others), \
        [(o.nodeid, o.outcome, o.message[:800]) for o in others]
