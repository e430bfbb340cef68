"""Inference: chat completions (JSON and SSE), embeddings and models (routes.py), the steps
they share (call.py, admission.py), billing of a request (billing.py), model resolution
(model_registry.py). Upstream failures propagate to the boundary's one mapping
(gateway/web/errors.py), a refusal of the org's own provider key included."""
