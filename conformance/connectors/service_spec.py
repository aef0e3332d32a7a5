"""A server a connector needs, as data in its profile (``connectors.yaml``, key ``services``).

The schema lives apart from ``connectors.services``, which runs the servers: the
profile loader reads this shape, and the runner (a pytest plugin that reaches the
reliability hooks and, through them, connector selection and the profiles) uses
it, so keeping it below both is what keeps the import graph free of cycles.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class HttpReset(BaseModel):
    """The server's own "forget everything" call: ``POST http://127.0.0.1:{port}{path}`` with ``body``."""

    model_config = ConfigDict(extra="forbid")
    port: str  # a name from the service's ``ports``
    path: str
    body: str = ""  # JSON


class ServiceSpec(BaseModel):
    """One server, as data in a connector profile (``connectors.yaml``, key ``services``).

    Placeholders in ``command``, ``files`` and ``env``: ``{python}`` (this interpreter),
    ``{dir}`` (the service's own folder), ``{port:NAME}`` (a loopback port chosen for it).
    The connector's ``extra_config`` and ``env`` name them as ``{SERVICE.port:NAME}`` and
    ``{SERVICE.dir}``.
    """

    model_config = ConfigDict(extra="forbid")
    command: list[str]  # argv; the first word is looked up on PATH, then beside the interpreter
    ports: list[str] = Field(default_factory=lambda: ["main"])
    ready: str = "main"  # the port that accepts a TCP connection once the server is ready
    files: dict[str, str] = Field(default_factory=dict)  # written into {dir} before the start
    env: dict[str, str] = Field(default_factory=dict)  # set for the connector while a test runs
    per_test: Literal["restart", "reset", "shared"] = "restart"  # how no test sees another's data
    reset: HttpReset | None = None  # with per_test: reset
    start_timeout_s: float = 90.0
    timeout_s: float | None = None  # the test's timeout when it is shorter than the per-test one
