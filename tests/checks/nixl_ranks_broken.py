"""A deliberately broken copy of vLLM's NixlConnector for a producer of more tensor-parallel ranks than its consumer
(conformance/test_pair_ranks.py).

Its edit sits in code only that situation runs: with one rank per side the consumer reads from one source rank, so
the order of source ranks cannot matter. tests/checks/test_nixl_ranks_catches.py proves the situation fails it and
the unmodified NixlConnector passes.
"""

from __future__ import annotations

from dataclasses import replace

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector


class _SlotsFromTheEnd(dict):
    """The worker's per-engine TP mappings, each storing a source rank's head slot counted from the last slot."""

    def __setitem__(self, engine_id, plan):
        last = max(plan.rank_to_attention_slot.values(), default=0)
        super().__setitem__(engine_id, replace(plan, rank_to_attention_slot={
            rank: last - slot for rank, slot in plan.rank_to_attention_slot.items()}))


class _EveryReplicaRead(dict):
    """The worker's per-engine TP mappings, each reading every group from every source rank it handshakes with,
    each rank into its own slice of the consumer's blocks: vLLM's mapping without its GQA dedup (``np.unique`` over
    the remote ranks' heads), as if no two producer ranks held the same KV head."""

    def __setitem__(self, engine_id, plan):
        ranks = plan.all_source_ranks
        super().__setitem__(engine_id, replace(
            plan, source_ranks_per_group=tuple(ranks for _ in plan.source_ranks_per_group),
            rank_to_attention_slot={rank: slot for slot, rank in enumerate(ranks)}))


class ReadsEveryReplicaConnector(NixlConnector):
    """Plans its attention reads from every rank of a larger-TP producer, each into its own slice of the consumer's
    blocks, even where the producer runs more ranks than the model has KV heads and several ranks hold replicas of
    one head: the consumer's one head is split between two replicas' first halves, and its second half never
    arrives. Where each rank holds heads of its own (or an MLA latent, read from one rank) the plan is vLLM's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker.tp_mappings = _EveryReplicaRead(worker.tp_mappings)


class SwappedRankSlicesConnector(NixlConnector):
    """The consumer counts each producer rank's slice of its blocks from the end (the last rank's heads into the
    first slice): every byte arrives and every rank is notified, but the heads sit in the wrong slices whenever the
    producer has more than one rank."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker.tp_mappings = _SlotsFromTheEnd(worker.tp_mappings)


class UnnotifiedReplicasConnector(NixlConnector):
    """Tells only the producer rank whose TP rank is its own that it is done reading (right when both sides run the
    same TP size): an MLA consumer reads the latent from one rank of a larger-TP producer and must notify the other
    replicas, which otherwise keep the request's blocks until their lease runs out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            send = worker.nixl_wrapper.send_notif

            def own_rank_only(agent_name, *send_args, notif_msg=b"", **send_kwargs):
                ranks = {name: rank for agents in worker._remote_agents.values() for (_, rank), name in agents.items()}
                heartbeat = bytes(notif_msg).startswith(b"HB:")
                if not heartbeat and ranks.get(agent_name, worker.tp_rank) != worker.tp_rank:
                    return None
                return send(agent_name, *send_args, notif_msg=notif_msg, **send_kwargs)

            worker.nixl_wrapper.send_notif = own_rank_only


class EscalatedReplicaNotificationConnector(NixlConnector):
    """Lets a failed notification to an MLA replica it did not read from escape ``start_load_kv`` (where vLLM logs it
    and counts it): the engine step fails for a request whose KV the consumer already read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            log_failure = worker._log_failure

            def escalating(failure_type, *rest, msg="", **named):
                log_failure(failure_type, *rest, msg=msg, **named)
                if failure_type == "notification_failed" and msg.startswith("Remote rank will not update"):
                    raise RuntimeError(f"EscalatedReplicaNotificationConnector: could not notify a replica: {msg}")

            worker._log_failure = escalating
