"""Guardrails: checks the gateway runs on request text and on streamed model output.

`pii` finds personal data and secrets (`find_pii`) and masks them (`redact`); `injection`
finds known prompt-injection phrasings and chat-template tokens (`detect_injection`). Pure
functions of text: no I/O, no configuration.
"""
