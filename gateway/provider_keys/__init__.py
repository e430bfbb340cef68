"""Bring-your-own-key: the Provider Keys API (routes.py), the check of a key with its provider
(check.py), and the cached lookup the inference routes use (resolver.py)."""
