"""vLLM's and torch's logging quieted for ``kvconform bench``: its output is its table and findings.

vLLM logs at INFO to stdout by default, so the bench sets vLLM to errors on stderr (a user's own setting
wins), before anything imports vLLM, which reads the settings once.
"""

from __future__ import annotations

import logging
import os
import sys

# TORCH_LOGS=-all puts torch's own loggers at ERROR as torch sets them up at import: vLLM 0.33.0 calls torch
# APIs that torch 2.14.1 deprecates, and torch logs a WARNING line for each (register_opaque_type, ...).
VLLM_ENVIRONMENT = {"VLLM_LOGGING_LEVEL": "ERROR", "VLLM_LOGGING_STREAM": "ext://sys.stderr", "TORCH_LOGS": "-all"}


def quiet_vllm() -> None:
    """vLLM's logging settings for the bench, before vLLM is first imported (the option defaults import it).

    A vLLM that configures its logging at import reads the environment; vLLM 0.32
    configures it only from its engine's arguments, so its loggers have no handler
    here and Python's last-resort handler would print every warning: the ``vllm``
    logger gets the level and a stderr handler of its own.
    """
    for name, value in VLLM_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    logger = logging.getLogger("vllm")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())
