"""What vLLM's stats logger makes of the connector stats its scheduler returns, judged at every step.

A served vLLM's ``LoggingStatLogger`` hands every ``SchedulerStats.kv_connector_stats`` that carries any (the
connector's stats as ``KVConnectorStats.to_dict()`` made them: a dict, which crosses from the engine core's process
to the front end's) to its ``KVConnectorLogging``. That rebuilds the connector's stats object from the dict (the
configured connector class's ``build_kv_connector_stats``), aggregates it into the interval's (``aggregate``), and at
the end of each log interval asks ``is_empty`` and ``reduce`` and logs the summary ("KV Transfer metrics: ...").
vLLM's ``KVConnectorStats`` (``kv_connector/v1/metrics.py``) leaves each of these to the connector's own stats class:
one that does not rebuild from its dict is stats vLLM collects every step and never logs (it warns once), and one
that does not reduce makes the logger raise at every interval.

A served vLLM's ``PrometheusStatLogger`` (on by default in its API server) hands the same dict, whenever the scheduler
returned one, to its ``KVConnectorProm``, which passes it to the metrics the connector class registered
(``build_prom_metrics``): a connector whose metrics cannot export its own stats makes every step's recording raise.

``StatsLog`` is vLLM's own ``KVConnectorLogging`` and ``KVConnectorProm`` (registering into a registry of its own),
built from the engine's config as the loggers build them, fed what the scheduler returned after each step, and made
to log then: vLLM's interval is seconds long
(``VLLM_LOG_STATS_INTERVAL``), many steps, while a check runs a few, and every step's stats must be summarized
whatever the run's length. ``SchedulerDriver`` (engine/scheduler.py) keeps one per engine whose scheduler collects
stats, so every check that drives vLLM's scheduler judges it; a problem names the connector's stats class, the
method vLLM called and what it was given.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

SHOWN_CHARS = 300  # of a returned stats dict in a message
PROM_LABELS = ["model_name", "engine"]  # the labels vLLM's PrometheusStatLogger gives per-engine metrics
PROM_LABEL_VALUES = ("kvconform", "0")


def shown(returned: dict[str, Any]) -> str:
    text = repr(returned)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def given(returned: dict[str, Any]) -> str:
    """What vLLM's scheduler returned, for a message (built only for one: stats come every step)."""
    return f"the connector stats vLLM's scheduler returned, {shown(returned)}"


def raised(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def isolated_prom(config: Any) -> tuple[Any, Any]:
    """vLLM's ``KVConnectorProm`` for ``config``'s connector, registering into a registry of its own (through the
    metric classes it hands the connector, as vLLM's Ray logger swaps them); and that registry."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorProm

    registry = CollectorRegistry()
    isolated = type("IsolatedKVConnectorProm", (KVConnectorProm,), {
        "_gauge_cls": functools.partial(Gauge, registry=registry),
        "_counter_cls": functools.partial(Counter, registry=registry),
        "_histogram_cls": functools.partial(Histogram, registry=registry)})
    return isolated(config, PROM_LABELS, {0: list(PROM_LABEL_VALUES)}), registry


@dataclass
class StatsLog:
    """vLLM's stats loggers of one engine's connector stats, and the summaries logged (one per step with any)."""

    logging: Any  # vLLM's KVConnectorLogging, for the engine's kv_transfer_config
    vllm_config: Any
    # vLLM's KVConnectorProm: a served vLLM builds it as its logger starts, here at the first stats returned, so an
    # engine that returns none builds no metrics
    prom: Any = None
    logged: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, vllm_config: Any) -> StatsLog:
        from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging

        return cls(KVConnectorLogging(vllm_config.kv_transfer_config), vllm_config)

    def take(self, returned: dict[str, Any] | None) -> str | None:
        """Log what the scheduler returned in one step, as vLLM's logger does at an interval's end, and export it as
        its Prometheus logger does; None, or why vLLM's loggers cannot."""
        if returned is None:
            return None
        problem = self._exported(returned)
        if problem is None and returned:  # LoggingStatLogger.record observes only stats that carry any
            problem = self._logged(returned)
        return problem

    def _exported(self, returned: dict[str, Any]) -> str | None:
        """PrometheusStatLogger.record: ``KVConnectorProm.observe`` of every stats dict the scheduler returned."""
        try:
            if self.prom is None:
                self.prom, _ = isolated_prom(self.vllm_config)
        except Exception as error:  # noqa: BLE001 - the connector's metrics code raised inside vLLM's logger
            return (f"vLLM's Prometheus logger (KVConnectorProm) raised {raised(error)} building the connector "
                    f"class's metrics (build_prom_metrics): a served vLLM's API server cannot start its metrics")
        try:
            self.prom.observe(copy.deepcopy(returned), 0)
        except Exception as error:  # noqa: BLE001 - the connector's metrics code raised inside vLLM's logger
            return (f"vLLM's Prometheus logger (KVConnectorProm.observe) raised {raised(error)} exporting "
                    f"{given(returned)} through the connector class's metrics "
                    f"({type(self.prom.prom_metrics).__name__}, from build_prom_metrics): a served vLLM's Prometheus "
                    f"logger raises at every step's stats")
        return None

    def _logged(self, returned: dict[str, Any]) -> str | None:
        """LoggingStatLogger.record and log: ``KVConnectorLogging`` of stats that carry any."""
        try:
            self.logging.observe(copy.deepcopy(returned))  # the front end's own copy, as it arrives over IPC
        except Exception as error:  # noqa: BLE001 - the connector's stats code raised inside vLLM's logger
            return (f"vLLM's stats logger (KVConnectorLogging.observe) raised {raised(error)}, rebuilding "
                    f"{given(returned)} with the connector class's build_kv_connector_stats: a served vLLM's logger "
                    f"fails on every step's stats")
        rebuilt = self.logging.transfer_stats_accumulator
        if rebuilt is None:
            return (f"the connector class's build_kv_connector_stats returned None for {given(returned)}: vLLM's "
                    f"stats logger (KVConnectorLogging) warns once that the connector 'does not implement the "
                    f"build_kv_connector_stats method' and never logs them")
        try:
            self.logging.log(log_fn=lambda message, *args: self.logged.append(message % args))
        except Exception as error:  # noqa: BLE001 - the connector's stats code raised inside vLLM's logger
            return (f"vLLM's stats logger (KVConnectorLogging.log) raised {raised(error)} "
                    f"summarizing {given(returned)}, rebuilt as {type(rebuilt).__name__}, whose is_empty() and "
                    f"reduce() it calls at the end of every log interval: a served vLLM's logger raises at every "
                    f"interval and its transfer metrics are never logged")
        return None
