"""The guardrails API: the configured guardrails as an organization sees them, and the opt-in
ones it turns on or off (docs/guardrails.md)."""
