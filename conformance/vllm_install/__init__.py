"""Which vLLM the harness runs on: versions, the window CI tests, where vLLM keeps what the harness drives."""
