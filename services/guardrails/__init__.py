"""Guardrails: PII, prompt injection and classifier checks on requests and answers."""
