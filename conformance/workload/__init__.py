"""Workloads like a busy server's through vLLM's real Scheduler, with invariants checked every step."""
