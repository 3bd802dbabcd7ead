"""One module per endpoint of the proxy: chat, text completions, embeddings,
models, status (``/healthz``, ``/metrics``) and the front doors (Messages,
Responses). Each reads its request through ``server.caller`` and reaches the
upstream through ``server.exchange``."""
