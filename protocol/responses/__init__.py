"""The Responses API (`POST /v1/responses`): response objects, and the translation of chat
completion answers (bodies and streams) into them. Pure protocol code, no I/O."""
