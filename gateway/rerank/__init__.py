"""POST /v1/rerank (docs/rerank.md)."""
