"""Guardrails on the wire: the requests the gateway sends to a classifier and how it reads the
answers (moderation.py: OpenAI's moderation endpoint, and Llama Guard / ShieldGemma style guard
models behind a chat completions endpoint). Pure: no I/O."""
