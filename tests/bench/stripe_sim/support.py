"""Shared pieces of the simulated Stripe's tests (bench/stripe/): the keys, the official SDK's
async client pointed at a sim (HTTPX on Trio, no retries unless asked), a clock for `created`."""

from __future__ import annotations

import pytest
import stripe

from bench.stripe import StripeSim

KEY = "sk_test_sim_0123456789"
WHSEC = "whsec_test_secret"

# stripe 16.1.0's HTTPXClient passes the encoded form as `data=<str>`, which httpx 0.28
# deprecates; under this suite's warnings-as-errors the warning is raised inside the request and
# the SDK reports it as an APIConnectionError. Test modules apply this mark.
SDK_WARNING = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")


class Clock:
    """Unix seconds the sim stamps on objects and signatures; tests move it."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def sdk_client(
    sim: StripeSim, *, key: str = KEY, retries: int = 0, timeout: float = 10.0
) -> tuple[stripe.StripeClient, stripe.HTTPXClient]:
    """A client and its HTTP client (close it: `await http.close_async()`)."""
    http = stripe.HTTPXClient(timeout=timeout)
    client = stripe.StripeClient(
        key, base_addresses={"api": sim.url}, http_client=http, max_network_retries=retries
    )
    return client, http
