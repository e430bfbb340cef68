"""A simulated model provider speaking the OpenAI and Anthropic wire formats over real HTTP/1.1.

The gateway's integration tests run it in-process (`serve_upstream` on port 0); the bench suite
runs it as its own process (`python -m bench.upstream`). Layers: `http` (bytes <-> requests),
`completion` (what the model says), `openai_routes` / `anthropic_routes` (wire formats), `dispatch`
(which route, injected failures), `server` (sockets, pacing, statistics), `cli`.
"""

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.server import UpstreamServer, serve_upstream

__all__ = ["RecordedRequest", "UpstreamBehavior", "UpstreamServer", "serve_upstream"]
