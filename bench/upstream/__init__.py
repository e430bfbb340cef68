"""A simulated model provider speaking the OpenAI and Anthropic wire formats over real HTTP/1.1.

The gateway's integration tests run it in-process (`serve_upstream` on port 0); the bench suite
runs it as its own process (`python -m bench.upstream`). Layers: `http` (bytes <-> requests),
`completion` (what the model says), `openai_routes` / `anthropic_routes` (wire formats), `dispatch`
(which route, injected failures), `faults` (per-model failures on command), `server` (sockets,
statistics) and `streams` (pacing), `cli` (with `fault_spec`).
"""

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.faults import Faults
from bench.upstream.server import UpstreamServer, serve_upstream

__all__ = ["Faults", "RecordedRequest", "UpstreamBehavior", "UpstreamServer", "serve_upstream"]
