"""A connector package whose connector module only delegates, with its device calls in a helper module (kvconform
issue 56: a third-party connector's lint cell passed while its worker helper called ``torch.cuda`` unguarded).

``connector.py``'s CudaHelperConnector (vLLM's ExampleConnector, waiting for its saves through ``worker.py``)
has no finding of its own; ``worker.py`` creates a CUDA event on the current stream and ``sync.py``, imported
inside a function, synchronizes the CUDA device: three KVC004 errors the lint must find by following the
imports. ``unused.py`` makes the same call but no connector imports it, so no lint of a connector reads it.
``clean_connector.py``'s CleanHelperConnector is the control: its helper ``guarded.py`` guards its CUDA call.
"""
