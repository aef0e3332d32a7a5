"""A deliberately broken copy of vLLM's ExampleConnector whose key leaves the prompt's images out.

ExampleConnector names a stored prompt's folder by a hash of its token ids and its images' hashes
(``mm_hashes``, ``_generate_foldername_debug``); vLLM's block hashes carry the images' identifiers the same
way (``_gen_mm_extra_hash_keys``). Drop them and two prompts with the same token ids and different images
share one folder: the consumer of the second gets the first's KV. tests/checks/test_images_catches.py shows
the image round-trip (``test_images``) fails it and the other round-trips pass it.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class ImageBlindKeyConnector(ExampleConnector):
    """The folder name hashes the token ids only: ``mm_hashes`` dropped from the key."""

    def _generate_foldername_debug(self, token_ids, mm_hashes, create_folder=False):
        return super()._generate_foldername_debug(token_ids, [], create_folder)
