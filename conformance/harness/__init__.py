"""A stand-in for vLLM's engine core and model runner that drives real connectors.

Everything a connector sees is vLLM's own: ``VllmConfig``, ``KVCacheConfig``
from vLLM's grouping code, caches from vLLM's allocator in the backend's layout,
``Request``/``SchedulerOutput`` from vLLM's real ``Scheduler``, and the forward
context from ``set_forward_context``. What stands in is only the model: no
weights run; the cache holds bytes the checks wrote.
"""
