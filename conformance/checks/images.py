"""Prompts with images: a connector's key must tell two images apart where the token ids are the same.

An image's placeholder tokens are the same ids whatever the image (the model's image token), so two
prompts can match token for token and still need different KV; vLLM keeps them apart by putting each
image's hash (``MultiModalFeatureSpec.identifier``) into its block hashes (``_gen_mm_extra_hash_keys``), and
ExampleConnector puts them into its folder name (``mm_hashes``). A connector whose key is the token ids
alone hands one image's KV to a prompt about another. The producer stores a prompt with image X; a fresh
consumer asks for the same token ids with image Y (must miss) and with image X again (must hit, byte for
byte, through the round-trip's own verification).
"""

from __future__ import annotations

from ..engine.prompts import request_prompt
from ..engine.requests import Image
from ..engine.rig import Rig
from .roundtrip import RoundTripFailure, RoundTripResult, verify_roundtrip

STORED_BLOCKS, EXTRA_TOKENS = 4, 5  # the prompt: an unaligned one, its image inside the stored whole blocks
IMAGE_OFFSET = 3  # the image's first placeholder token; it spans one block's worth of tokens from there


class ImageKeyFailure(RoundTripFailure):
    """A connector handed a prompt the KV stored for the same token ids with another image."""


def images(block_size: int) -> tuple[Image, Image]:
    """Image X (stored) and image Y (another picture at the same place in the same tokens)."""
    return (Image("image-x-" + "a" * 56, IMAGE_OFFSET, block_size),
            Image("image-y-" + "b" * 56, IMAGE_OFFSET, block_size))


def run_image_roundtrip(rig: Rig) -> RoundTripResult:
    """The producer stores the prompt with image X; the consumer asks for it with image Y, then with X again."""
    producer_role, consumer_role = rig.roles()
    prompt = request_prompt(0, STORED_BLOCKS * rig.block_size + EXTRA_TOKENS)
    image_x, image_y = images(rig.block_size)

    producer = rig.engine(producer_role, fill_seed=1234)
    producer.scheduler.add("image-x", prompt, images=(image_x,))
    producer.scheduler.run(producer.runner)
    producer.close()

    consumer = rig.engine(consumer_role)
    consumer.scheduler.add("image-y", prompt, images=(image_y,))
    consumer.scheduler.add("image-x-again", prompt, images=(image_x,))
    consumer.scheduler.run(consumer.runner)
    consumer.close()

    claimed = consumer.scheduler.external_tokens("image-y")
    if claimed:
        raise ImageKeyFailure(
            f"{rig.connector.name} claimed {claimed} external tokens for image-y, whose {len(prompt)} prompt token "
            f"ids equal those of image-x stored before, but whose image differs (identifier {image_y.identifier!r}, "
            f"not {image_x.identifier!r}, at tokens {IMAGE_OFFSET}-{IMAGE_OFFSET + rig.block_size - 1}): its key "
            f"leaves the image's hash out (vLLM's block hashes and ExampleConnector's mm_hashes carry it), so the "
            f"request got the KV of another picture")
    return verify_roundtrip(rig, producer, consumer, {"image-x": prompt}, {"image-x-again": prompt},
                            producer_ids={"image-x-again": "image-x"})
