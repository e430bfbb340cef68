"""/metrics after real requests through a gateway and the simulated upstream: it parses, keeps
Prometheus's naming rules and the bounded labels (tests/metrics_lint.py), and every family
issue #25 names is there with the values those requests made."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from prometheus_client.metrics_core import Metric

from actors.supervisor import RestartPolicy
from tests.gateway.test_health import Crashy
from tests.inference import Rig, inference_rig
from tests.metrics_lint import lint, value
from tests.waiting import wait_until

MODELS = {"dead/gone", "sim/sim-small", "sim/sim-embed", "claude/claude-haiku"}
PROVIDERS = {"sim", "claude", "dead"}
BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
ROOT = Path(__file__).resolve().parents[2]
READ_TIMEOUT_S = 900.0  # past the standard buckets: added as the last one


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, read_timeout_s=READ_TIMEOUT_S) as r:
        yield r


async def scrape(rig: Rig) -> dict[str, Metric]:
    text = (await rig.gateway.client.get("/metrics")).text
    return lint(text, models=MODELS, providers=PROVIDERS)


async def key(rig: Rig, name: str, **fields: object) -> str:
    r = await rig.gateway.client.post(
        "/v1/keys", json={"name": name, **fields}, headers=rig.gateway.auth()
    )
    assert r.status_code == 200, r.text
    return str(r.json()["key"])


async def test_requests_are_counted_by_route_status_class_model_and_provider(rig: Rig) -> None:
    ok = await rig.chat(BODY)
    assert ok.status_code == 200
    usage = ok.json()["usage"]
    streamed = await rig.chat({**BODY, "stream": True})
    assert streamed.status_code == 200
    # a name the client chose (a provider's model nobody configured): `other`, not its name
    await rig.chat({**BODY, "model": "sim/client-chosen-name"})
    dead = await rig.chat({**BODY, "model": "gone"})  # connection refused: 502/503
    assert dead.status_code >= 500
    await rig.gateway.client.get("/v1/no/such/route")
    families = await scrape(rig)

    requests = families["gateway_requests"]
    chat = {"route": "/v1/chat/completions", "model": "sim/sim-small", "provider": "sim"}
    assert value(requests, "gateway_requests_total", status_class="2xx", **chat) == 2
    assert value(requests, "gateway_requests_total", model="other") == 1
    assert value(requests, "gateway_requests_total", status_class="5xx", model="dead/gone") == 1
    assert value(requests, "gateway_requests_total", route="unmatched", model="none") == 1
    for sample in requests.samples:
        assert "/v1/no/such/route" not in sample.labels.values()  # templates, never paths

    latency = families["gateway_request_duration_seconds"]
    assert value(latency, "gateway_request_duration_seconds_count", **chat) == 2
    bounds = {s.labels["le"] for s in latency.samples if s.name.endswith("_bucket")}
    assert str(READ_TIMEOUT_S) in bounds and "600.0" in bounds and "0.005" in bounds

    ttfb = families["gateway_time_to_first_byte_seconds"]
    assert value(ttfb, "gateway_time_to_first_byte_seconds_count", **chat) == 1  # the stream
    first_byte = value(ttfb, "gateway_time_to_first_byte_seconds_sum", **chat)
    whole = value(latency, "gateway_request_duration_seconds_sum", **chat)
    assert 0 < first_byte < whole

    tokens = families["gateway_tokens"]
    small = {"model": "sim/sim-small", "provider": "sim"}
    assert (
        value(tokens, "gateway_tokens_total", type="input", **small) == 2 * usage["prompt_tokens"]
    )
    assert value(tokens, "gateway_tokens_total", type="output", **small) == 2 * 4
    assert value(families["gateway_cost_usd"], "gateway_cost_usd_total", **small) > 0

    attempts = families["gateway_upstream_attempt_duration_seconds"]
    name = "gateway_upstream_attempt_duration_seconds_count"
    assert value(attempts, name, provider="sim", outcome="ok") >= 2
    assert value(attempts, name, provider="dead", outcome="unavailable") >= 1

    for family in ("process_cpu_seconds", "process_resident_memory_bytes", "python_info"):
        assert families[family].samples, family
    assert "python_gc_collections" in families


async def test_402_and_429_are_counted_by_route(rig: Rig) -> None:
    limited = await key(rig, "limited", rate_limit_rpm=1)
    assert (await rig.chat(BODY, key=limited)).status_code == 200
    assert (await rig.chat(BODY, key=limited)).status_code == 429
    broke = await key(rig, "broke", daily_budget_usd=0.000001)
    assert (await rig.chat(BODY, key=broke)).status_code == 402
    family = (await scrape(rig))["gateway_limited_requests"]
    route = "/v1/chat/completions"
    assert value(family, "gateway_limited_requests_total", route=route, status="429") == 1
    assert value(family, "gateway_limited_requests_total", route=route, status="402") == 1
    assert {s.labels["status"] for s in family.samples} == {"402", "429"}


async def test_an_actor_restart_raises_the_restart_counter(rig: Rig) -> None:
    def restarts(families: dict[str, Metric]) -> float:
        counter = families["gateway_actor_restarts"]
        return value(counter, "gateway_actor_restarts_total", kind="background")

    before = restarts(await scrape(rig))
    supervisor = rig.gateway.runtime.supervisor
    crashy = Crashy()
    await supervisor.start(crashy, policy=RestartPolicy(initial_backoff=0.001, max_backoff=0.001))
    await wait_until(lambda: crashy.runs >= 3)
    await supervisor.stop("crashy")
    after = restarts(await scrape(rig))
    assert after >= before + 2
    # the actor is gone, its restarts still count: a counter never goes back
    assert supervisor.restart_counts["background"] == after


GOOD_HISTOGRAM = """# HELP h_seconds x
# TYPE h_seconds histogram
h_seconds_bucket{le="0.1"} 1
h_seconds_bucket{le="1.0"} 2
h_seconds_bucket{le="+Inf"} 2
h_seconds_sum 0.6
h_seconds_count 2
"""


@pytest.mark.parametrize(
    ("text", "broken"),
    [
        ("# HELP g_total x\n# TYPE g_total gauge\ng_total 1\n", "named like a counter"),
        (GOOD_HISTOGRAM.replace('le="0.1"} 1', 'le="0.1"} 3'), "not cumulative"),
        (GOOD_HISTOGRAM.replace("h_seconds_count 2", "h_seconds_count 3"), "!= _count"),
        (GOOD_HISTOGRAM.replace("h_seconds_sum 0.6\n", ""), "without _bucket/_sum/_count"),
        (GOOD_HISTOGRAM + GOOD_HISTOGRAM, "declared twice"),
        ('# HELP r_total x\n# TYPE r_total counter\nr_total{status_class="200"} 1\n', "200"),
        ('# HELP r_total x\n# TYPE r_total counter\nr_total{model="ft:mine"} 1\n', "ft:mine"),
        ("# HELP l_ms x\n# TYPE l_ms gauge\nl_ms 1\n", "base unit"),
    ],
)
def test_the_lint_refuses_what_breaks_the_rules(text: str, broken: str) -> None:
    lint(GOOD_HISTOGRAM, models=MODELS)
    with pytest.raises(AssertionError, match=broken):
        lint(text, models=MODELS)


# Run in a process of its own: prometheus_client picks its multiprocess values at import.
SHARED_SCRIPT = """
import sys
from gateway.operations.metrics import Metrics, duration_buckets
from gateway.web.context import RequestContext

metrics = Metrics(duration_buckets([900.0]))
metrics.know(["sim/sim-small"], ["sim"])
metrics.counter("gateway_actor_restarts", "Restarts.", lambda: [({"kind": "background"}, 2.0)])
saved = [0.25]  # a running total without labels, in float (as the cache's saved USD)
metrics.counter("gateway_cache_saved_usd", "Saved.", lambda: [({}, saved[0])])
metrics.render()
saved[0] = 0.75  # grown since the last publication: the counter adds the difference
ctx = RequestContext(request_id="req_1", method="POST", path="/x", started=10.0)
ctx.model = ctx.deployment = "sim/sim-small"
ctx.stream, ctx.first_byte_at = True, 10.25
ctx.prompt_tokens, ctx.completion_tokens, ctx.cost_usd = 7, 3, 0.5
for _ in range(2):
    metrics.observe_request(ctx, "/v1/chat/completions", 200, 1.5)
refused = RequestContext(request_id="req_2", method="POST", path="/x", started=0.0)
refused.model = "ft:someone's"
metrics.observe_request(refused, "/v1/chat/completions", 429, 0.01)
metrics.observe_attempt("sim", "ok", 0.2)
sys.stdout.write(metrics.render())
"""


async def test_the_shared_families_under_workers_keep_the_rules(tmp_path: Path) -> None:
    """`--workers N`'s multiprocess values: the same families, labels and values."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "GATEWAY_WORKER_INDEX": "3"}
    done = await trio.run_process(
        [sys.executable, "-c", SHARED_SCRIPT], env=env, capture_stdout=True, cwd=ROOT
    )
    families = lint(done.stdout.decode(), models={"sim/sim-small"}, providers={"sim"})
    chat = {"route": "/v1/chat/completions", "model": "sim/sim-small", "provider": "sim"}
    assert value(families["gateway_requests"], "gateway_requests_total", **chat) == 2
    ttfb = families["gateway_time_to_first_byte_seconds"]
    assert value(ttfb, "gateway_time_to_first_byte_seconds_sum", **chat) == 0.5
    tokens = families["gateway_tokens"]
    small = {"model": "sim/sim-small", "provider": "sim"}
    assert value(tokens, "gateway_tokens_total", type="input", **small) == 14
    assert value(tokens, "gateway_tokens_total", type="output", **small) == 6
    assert {s.labels["model"] for s in tokens.samples} == {"sim/sim-small"}  # no zeros
    assert value(families["gateway_cost_usd"], "gateway_cost_usd_total", **small) == 1.0
    limited = families["gateway_limited_requests"]
    assert value(limited, "gateway_limited_requests_total", status="429") == 1
    assert value(families["gateway_requests"], "gateway_requests_total", model="other") == 1
    restarts = families["gateway_actor_restarts"]
    assert value(restarts, "gateway_actor_restarts_total", kind="background") == 2
    saved = families["gateway_cache_saved_usd"]
    assert saved.type == "counter"
    assert value(saved, "gateway_cache_saved_usd_total") == 0.75
    attempts = families["gateway_upstream_attempt_duration_seconds"]
    name = "gateway_upstream_attempt_duration_seconds_bucket"
    assert value(attempts, name, provider="sim", le="900.0") == 1
    cpu = families["process_cpu_seconds"]
    assert [s.labels for s in cpu.samples] == [{"worker": "3"}]
