"""The audio routes (docs/audio.md): text-to-speech relayed as the provider makes it
(`speech`), and transcription and translation uploads streamed to the provider without being
held (`transcription`). Wire formats are in protocol/audio/."""

from gateway.audio.routes import COMPLETION_ROUTES, FORM_OVERHEAD_BYTES, routes

__all__ = ["COMPLETION_ROUTES", "FORM_OVERHEAD_BYTES", "routes"]
