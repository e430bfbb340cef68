"""Schemathesis against a real gateway's own /openapi.json: the rig, the seeded objects and the
run. Used by tests/gateway/test_openapi_fuzz.py (bounded, in `make test`) and `make fuzz`
(longer, FUZZ_EXAMPLES per operation).

The gateway runs in this process on the suite's backend with the simulated upstream behind
every model kind (chat, embeddings, speech, transcription, images, rerank, fine-tuning), so
schema-valid requests reach the upstream. Every object an operation's path names (a key, a
file, a webhook and one of its events, a response, a fine-tuning job, a provider key, an image
URL) is created first and handed to schemathesis as that path parameter's value; the operator
routes get the operator credential, everything else the organization's management key.

Schemathesis (its CLI, in a subprocess, so the event loop keeps serving) runs every check:
no 5xx, statuses, content types, headers and bodies as documented, schema-invalid requests
refused, auth not ignored, and schema-valid requests accepted. That last one allows 400 and
402: a schema-valid body can still name an unknown model, break a rule between fields that
JSON Schema does not express, or cost more than the organization's credit.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from PIL import Image

from tests.harness import OPERATOR_KEY
from tests.inference import Rig, inference_rig

ACCEPTED_STATUSES = ["2xx", "3xx", "400", "401", "402", "403", "404", "409", "429"]

FUZZ_TOML = """
[[providers]]
name = "co"
kind = "cohere"
base_url = "{upstream}/cohere/v1"
api_key = "sim-provider-secret-key"

[[models]]
id = "gpt-4o-mini-2024-07-18"
provider = "sim"
upstream = "sim-small-2024-07-18"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5
training_usd_per_mtok = 3

[[models]]
id = "tts-1"
provider = "sim"
upstream = "tts-1"
usd_per_1k_chars = 0.015

[[models]]
id = "whisper-1"
provider = "sim"
upstream = "whisper-1"
usd_per_minute = 0.006

[[models]]
id = "dall-e-2"
provider = "sim"
upstream = "dall-e-2"
usd_per_image = 0.02

[[models]]
id = "rerank-english-v3.0"
provider = "co"
upstream = "rerank-english-v3.0"
usd_per_search_unit = 0.002
"""


def png(width: int = 4, height: int = 4) -> bytes:
    out = io.BytesIO()
    Image.new("RGBA", (width, height), (200, 10, 10, 255)).save(out, format="PNG")
    return out.getvalue()


@asynccontextmanager
async def fuzz_rig(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Rig, dict[str, str]]]:
    async with inference_rig(
        database_url,
        tmp_path,
        credit_usd=1000.0,
        extra_toml=lambda upstream: FUZZ_TOML.format(upstream=upstream),
        GATEWAY_OPERATOR_KEY=OPERATOR_KEY,
    ) as rig:
        yield rig, await seed(rig)


async def seed(rig: Rig) -> dict[str, str]:
    """Path parameter values naming real objects of the organization."""
    gw = rig.gateway
    client, auth = gw.client, gw.auth()

    async def post(path: str, **kwargs: Any) -> dict[str, Any]:
        r = await client.post(path, headers=auth, **kwargs)
        assert r.status_code < 300, f"{path}: {r.status_code} {r.text}"
        return dict(r.json())

    key = await post("/v1/keys", json={"name": "fuzzed"})
    line = b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ho"}]}'
    training = await post(
        "/v1/files",
        data={"purpose": "fine-tune"},
        files={"file": ("train.jsonl", line + b"\n" + line + b"\n", "application/jsonl")},
    )
    await post(
        "/v1/files",
        data={"purpose": "vision"},
        files={"file": ("pixel.png", png(), "image/png")},
    )
    webhook = await post(
        "/v1/webhooks", json={"url": "https://93.184.216.34/hook", "events": ["*"]}
    )
    test_event = await post(f"/v1/webhooks/{webhook['id']}/test", json={"type": "key.created"})
    response = await post("/v1/responses", json={"model": "small", "input": "hello", "store": True})
    job = await post(
        "/v1/fine_tuning/jobs",
        json={"model": "gpt-4o-mini-2024-07-18", "training_file": training["id"]},
    )
    provider_key = await post(
        "/v1/provider_keys", json={"provider": "sim", "api_key": "sk-byok-0123456789abcdef"}
    )
    image = await post(
        "/v1/images/generations",
        json={"model": "dall-e-2", "prompt": "a red square", "response_format": "url"},
    )
    token = str(image["data"][0]["url"]).rstrip("/").rsplit("/", 1)[-1]
    return {
        "key_id": key["id"],
        "file_id": training["id"],
        "webhook_id": webhook["id"],
        "event_id": test_event["id"],
        "response_id": response["id"],
        "job_id": job["id"],
        "provider_key_id": provider_key["id"],
        "token": token,
        "model_id": "ft:gpt-4o-mini-2024-07-18:none:x:ftjob_none",
    }


def config_toml(rig: Rig, parameters: dict[str, str]) -> str:
    """The schemathesis.toml of a run (see the module docstring)."""
    lines = [
        f'headers = {{ Authorization = "Bearer {rig.gateway.management_key}" }}',
        "[parameters]",
        *(f"{name} = {json.dumps(value)}" for name, value in parameters.items()),
        "[checks.positive_data_acceptance]",
        f"expected-statuses = {json.dumps(ACCEPTED_STATUSES)}",
        "[[operations]]",
        'include-path-regex = "^/v1/admin/"',
        f'headers = {{ Authorization = "Bearer {OPERATOR_KEY}" }}',
    ]
    return "\n".join(lines) + "\n"


@dataclass
class RunResult:
    returncode: int
    output: str  # schemathesis's report: failures with curl reproductions, then a summary

    @property
    def summary(self) -> str:
        """The counts: "Test cases: N generated, M found K unique failures, S skipped"."""
        at = self.output.rfind("Test cases:")
        lines = self.output[at:].split("\n", 2)[:2] if at >= 0 else []
        return " ".join(" ".join(lines).split())


# The generated phases get the seeded ids as path parameters. The stateful phase does not: it
# takes ids from what its own calls create (links), and a fixed id there would be used instead
# (say, of a key deleted earlier in the run), reported as "created resource not found".
PHASES = {"examples,coverage,fuzzing": True, "stateful": False}


async def run_schemathesis(
    rig: Rig,
    seeded: dict[str, str],
    workdir: Path,
    *,
    phases: str,
    examples: int,
    seed: int | None = None,
) -> RunResult:
    """One schemathesis run of `phases` over every operation, positive and negative modes,
    every check. One worker: with two, one worker's stateful scenario deletes what the other
    just created (and reports it as "created resource not found")."""
    rundir = workdir / phases.replace(",", "-")
    rundir.mkdir(parents=True)
    config = rundir / "schemathesis.toml"
    config.write_text(config_toml(rig, seeded if PHASES[phases] else {}))
    argv = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--no-color",
        f"--config-file={config}",
        "run",
        rig.gateway.url + "/openapi.json",
        f"--phases={phases}",
        "--checks=all",
        "--mode=all",
        f"--max-examples={examples}",
        "--workers=1",
        "--request-timeout=30",
    ]
    if seed is not None:
        argv.append(f"--seed={seed}")
    # In its own directory: schemathesis keeps its crash cache (for `st replay`) in the working
    # directory.
    done = await trio.run_process(
        argv, cwd=rundir, capture_stdout=True, stderr=subprocess.STDOUT, check=False
    )
    return RunResult(done.returncode, done.stdout.decode(errors="replace"))
