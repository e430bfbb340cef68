"""The usage area: GET /v1/usage (area.py, routes.py; storage/usage.py writes the counters)."""
