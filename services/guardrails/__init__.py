"""Guardrails: checks the gateway runs on request text and on streamed model output.

`pii` finds personal data and secrets (`find_pii`) and masks them (`redact`). Pure functions
of text: no I/O, no configuration.
"""
