"""The Keys API: an organization's secret keys (routes.py)."""
