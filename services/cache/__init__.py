"""The response cache (docs/cache.md)."""
