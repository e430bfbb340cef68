"""Inference: chat completions (JSON and SSE), embeddings and models (routes.py), the steps
they share (call.py, admission.py), billing of a request (billing.py), model resolution
(model_registry.py) and the mapping of upstream failures (upstream_errors.py)."""
