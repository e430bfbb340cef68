"""Bounded label values for /metrics: a request's status class, model and provider.

A label value a client can choose would make a new time series per value (a Prometheus
server's memory is per series), so only what the operator configured is used as it is:
`model` is a `[[models]]` id (the id a request reports: canonical `<provider>/<upstream>` or a
routed model's own id), `provider` a `[[providers]]` name. Anything else — a
`<provider>/<any upstream>` name, a fine-tuned `ft:` model — is `other`; a request with no model
(or not sent to any provider) is `none`. docs/decisions.md, "Metrics: labels, buckets, cost".
"""

from __future__ import annotations

from collections.abc import Iterable

OTHER = "other"
NONE = "none"
# By `status // 100`: a status outside 100-599 cannot be answered.
_CLASSES = ("1xx", "1xx", "2xx", "3xx", "4xx", "5xx")


def status_class(status: int) -> str:
    return _CLASSES[min(max(status // 100, 1), 5)]


# Read by the upstream attempt histogram: how an attempt ended (gateway/inference/routing.py).
OUTCOMES = ("ok", "http_429", "http_4xx", "http_5xx", "timeout", "unavailable", "malformed")


class LabelValues:
    """Maps a request's model and deployment to their label values (one dict look-up each)."""

    __slots__ = ("_models", "_providers")

    def __init__(self, models: Iterable[str] = (), providers: Iterable[str] = ()) -> None:
        self._models = {m: m for m in models}
        self._providers = {p: p for p in providers}

    def model(self, model: str | None) -> str:
        return NONE if model is None else self._models.get(model, OTHER)

    def provider(self, deployment: str | None) -> str:
        """`deployment` is `<provider>/<upstream>` (what answered), or a provider's name."""
        if deployment is None:
            return NONE
        return self._providers.get(deployment.partition("/")[0], OTHER)

    def models(self) -> list[str]:
        return sorted(self._models)
