"""A stand-in for vLLM's engine core and model runner that drives real connectors through vLLM's own objects."""
