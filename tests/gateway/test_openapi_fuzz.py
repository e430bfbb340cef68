"""Schemathesis against the gateway's own /openapi.json (tests/gateway/fuzz_rig.py): every
operation, positive and negative modes, every check, on each backend. Bounded here by
FUZZ_EXAMPLES per operation (default 20); `make fuzz` runs it longer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gateway.fuzz_rig import PHASES, fuzz_rig, run_schemathesis

pytestmark = pytest.mark.storage

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))


@pytest.mark.parametrize("phases", PHASES)
async def test_schemathesis_finds_nothing(database_url: str, tmp_path: Path, phases: str) -> None:
    async with fuzz_rig(database_url, tmp_path / "gw") as (rig, seeded):
        result = await run_schemathesis(rig, seeded, tmp_path, phases=phases, examples=EXAMPLES)
    print(f"schemathesis {phases} ({EXAMPLES} examples per operation): {result.summary}")
    assert result.returncode == 0, result.output[-30000:]
