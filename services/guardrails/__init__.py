"""Guardrails: checks on what goes to a model and what comes back (no HTTP here)."""
