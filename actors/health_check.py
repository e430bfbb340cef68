"""Active health checks of a deployment (docs/routing.md, "Health checks").

One actor per health-checked deployment on each instance (kind "background": no inbox, the
default restarts). Every `interval_s` it

- takes or renews the deployment's lease (storage/endpoint_health.py); the holder makes one
  real minimal inference through the deployment's provider client — a 1-token chat completion
  (Anthropic: the Messages shape) or a 1-input embedding — bounded by `timeout_s`, and records
  the outcome: `unhealthy_after` consecutive failures take the deployment out of rotation,
  `healthy_after` consecutive successes afterwards bring it back, each transition writing its
  event in the same transaction (once, however many instances run);
- reads the stored state and sets its balancer target's `healthy` (every instance, holder or
  not, so the whole fleet follows within one interval).

Any failure counts: a non-2xx status, a timeout, a connection that failed, an answer that is not
the API's shape. The check goes straight to the provider client, never through the accountant:
it is billed to no one. The database unavailable skips the round (logged at most once a
minute); the target keeps its last known state. On stop the lease is released, so another
instance takes over at once instead of after the lease's TTL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import trio

from actors.base import Actor
from actors.throttled_log import ThrottledWarning
from actors.upstream import UpstreamClient
from actors.webhooks.clock import WallClock
from actors.webhooks.dispatcher import new_owner
from protocol import anthropic_request
from protocol.errors import UpstreamError, UpstreamStatusError
from services.routing.balancer import Target
from storage.endpoint_health import Endpoint, EndpointHealth, EndpointHealthRepository
from storage.errors import StorageUnavailable

log = logging.getLogger("gateway.routing")
_RELEASE_TIMEOUT_S = 5.0
_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """A deployment's `health_check` table, as plain values."""

    interval_s: float
    timeout_s: float
    unhealthy_after: int
    healthy_after: int
    kind: Literal["chat", "embeddings"]

    @property
    def lease_ttl_us(self) -> int:
        """Long enough to cover a check and the next renewal with room to spare."""
        return round(2 * (self.interval_s + self.timeout_s) * 1_000_000)


def probe_request(kind: str, provider_kind: str, upstream: str) -> tuple[str, bytes]:
    """The path and body of the check's inference."""
    if kind == "embeddings":
        return "embeddings", msgspec.json.encode({"model": upstream, "input": ["ping"]})
    chat = msgspec.json.encode(
        {"model": upstream, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    )
    if provider_kind == "anthropic":
        return "messages", anthropic_request.to_messages_request(
            chat, upstream_model=upstream, stream=False
        )
    return "chat/completions", chat


def answer_problem(kind: str, provider_kind: str, content: bytes) -> str | None:
    """Why a 2xx answer is not the API's answer (None: it is)."""
    try:
        answer: Any = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return "malformed answer: not JSON"
    field = (
        "data" if kind == "embeddings" else "content" if provider_kind == "anthropic" else "choices"
    )
    if not isinstance(answer, dict) or not isinstance(answer.get(field), list) or not answer[field]:
        return f"malformed answer: no {field}"
    return None


class HealthCheck(Actor):
    kind = "background"

    def __init__(
        self,
        repo: EndpointHealthRepository,
        target: Target,
        endpoint: Endpoint,
        client: UpstreamClient,
        spec: CheckSpec,
        *,
        owner: str | None = None,
        clock: WallClock | None = None,
    ) -> None:
        self.name = f"health-check:{endpoint.model}:{endpoint.deployment}"
        self.repo = repo
        self.target = target
        self.endpoint = endpoint
        self.spec = spec
        self.owner = owner or new_owner()
        self.clock = clock or WallClock()
        self._client = client
        self._request = probe_request(spec.kind, client.kind, endpoint.upstream)
        self._ensured = False
        self._failed = ThrottledWarning(log, "health check: the database failed: %s", 60.0)
        self.state: EndpointHealth | None = None
        self.holder = False  # held the lease at the last round
        self.checks = 0  # checks made here
        self.failures = 0  # of which failed
        self.transitions = 0  # transitions this instance wrote

    def statistics(self) -> dict[str, object]:
        state = self.state
        return {
            "healthy": self.target.healthy,
            "checking": self.holder,
            "checks": self.checks,
            "failures": self.failures,
            "transitions": self.transitions,
            "consecutive_failures": None if state is None else state.consecutive_failures,
            "consecutive_successes": None if state is None else state.consecutive_successes,
            "last_error": None if state is None else state.last_error,
            "interval_s": self.spec.interval_s,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                try:
                    await self.tick()
                except StorageUnavailable as exc:
                    self._failed(exc)
                await trio.sleep(self.spec.interval_s)
        finally:
            if self.holder:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + _RELEASE_TIMEOUT_S
                    try:
                        e = self.endpoint
                        await self.repo.release(e.model, e.deployment, self.owner)
                    except StorageUnavailable:  # the lease then simply expires
                        pass

    async def tick(self) -> None:
        """One round: the lease, the check if held, then the state into the target."""
        e, spec = self.endpoint, self.spec
        if not self._ensured:
            await self.repo.ensure(e.model, e.deployment, self.clock.now_us())
            self._ensured = True
        now = self.clock.now_us()
        self.holder = await self.repo.claim(
            e.model, e.deployment, self.owner, now, spec.lease_ttl_us
        )
        state = None
        if self.holder:
            error = await self.check()
            outcome = await self.repo.record(
                e,
                self.owner,
                self.clock.now_us(),
                error=error,
                unhealthy_after=spec.unhealthy_after,
                healthy_after=spec.healthy_after,
            )
            if outcome is not None:
                state, event = outcome
                if event is not None:
                    self.transitions += 1
                    log.warning(
                        "deployment %s of %s: %s (%s)",
                        e.deployment,
                        e.model,
                        event,
                        state.last_error if event.endswith("unhealthy") else "recovered",
                    )
        if state is None:
            state = await self.repo.get(e.model, e.deployment)
        if state is not None:
            self.state = state
            self.target.healthy = state.healthy

    async def check(self) -> str | None:
        """One check; None when it succeeded, else why it failed."""
        self.checks += 1
        path, body = self._request
        error: str | None
        try:
            with trio.fail_after(self.spec.timeout_s):
                content, _ = await self._client.post_json(path, body)
            error = answer_problem(self.spec.kind, self._client.kind, content)
        except trio.TooSlowError:
            error = f"timed out after {self.spec.timeout_s:g} s"
        except UpstreamStatusError as exc:
            error = f"status {exc.status}"
        except UpstreamError as exc:
            error = exc.detail or type(exc).__name__
        if error is not None:
            self.failures += 1
            return error[:_ERROR_CHARS]
        return None
