"""What a model's routing is, in the config: its deployments (`[[models.deployments]]`) and the
policy that picks among them, retries and cools them down (docs/routing.md).

A `[[models]]` entry with `provider` (and `upstream`) is a model of one deployment, as before;
one with `deployments` lists several, each a provider (one provider may back several) and that
provider's name for the model. Checks across tables (a deployment's provider exists) are the
loader's.
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

from msgspec import Meta

from gateway.config.values import FieldProblem, NonEmpty, Positive, PositiveInt, Price, Table

Strategy = Literal["priority", "weighted", "least_busy", "latency", "cost"]
# Statuses an attempt may be retried on: the provider's own trouble, never the client's request
# (a 4xx other than these says the request itself is wrong: another deployment would say so too).
RETRYABLE_4XX = frozenset({408, 409, 425, 429})
RetryStatus = Annotated[int, Meta(ge=400, le=599)]


class HealthCheckConfig(Table, frozen=True):
    """`health_check = {...}` on a deployment: a real minimal inference every `interval_s`."""

    interval_s: Positive = 10.0
    timeout_s: Positive = 5.0
    unhealthy_after: PositiveInt = 3  # consecutive failures: out of rotation
    healthy_after: PositiveInt = 2  # consecutive successes: back in
    kind: Literal["chat", "embeddings"] = "chat"  # a 1-token completion or a 1-input embedding


class DeploymentConfig(Table, frozen=True):
    provider: NonEmpty  # a [[providers]] name
    upstream: NonEmpty  # the provider's name for the model
    priority: Annotated[int, Meta(ge=0)] = 0  # lower tier first (strategy "priority")
    weight: Positive = 1.0  # share of traffic inside a tier (priority, weighted)
    # Own prices; None: the model's (or the shipped catalogue's for this upstream name).
    input_usd_per_mtok: Price | None = None
    output_usd_per_mtok: Price | None = None
    rpm: PositiveInt | None = None  # requests per minute this deployment takes, per instance
    tpm: PositiveInt | None = None  # tokens per minute, per instance
    health_check: HealthCheckConfig | None = None

    @property
    def name(self) -> str:
        """How answers and logs name it: `<provider>/<upstream>`."""
        return f"{self.provider}/{self.upstream}"


class RoutingPolicy(Protocol):
    """The routing fields of a `[[models]]` entry (schema.py `ModelConfig`)."""

    @property
    def retry_on_status(self) -> tuple[int, ...]: ...
    @property
    def trip_failures(self) -> int: ...
    @property
    def trip_window(self) -> int: ...
    @property
    def cooldown_s(self) -> float: ...
    @property
    def max_cooldown_s(self) -> float: ...


def check_routing(model: RoutingPolicy) -> None:
    """The checks across a model's routing fields; FieldProblem names the field."""
    for status in model.retry_on_status:
        if status < 500 and status not in RETRYABLE_4XX:
            allowed = ", ".join(str(s) for s in sorted(RETRYABLE_4XX))
            raise FieldProblem(
                "retry_on_status",
                f"{status} is the client's own error, never retried (4xx allowed: {allowed})",
            )
    if model.trip_failures > model.trip_window:
        raise FieldProblem("trip_failures", "must be at most trip_window")
    if model.max_cooldown_s < model.cooldown_s:
        raise FieldProblem("max_cooldown_s", "must be at least cooldown_s")
