"""Operating the gateway: /healthz, /metrics, /openapi.json, /v1/admin/actors (routes.py), and
the Prometheus metrics (metrics.py; across worker processes: metrics_shared.py)."""
