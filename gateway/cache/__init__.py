"""The cache area: the response cache instance (area.py) and its purge API (routes.py)."""
