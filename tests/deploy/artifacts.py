"""The deployment files, read as the tools that use them would: the Dockerfile's instructions,
the compose file, the nginx configuration, the systemd units, the Helm chart rendered
(helm_render.py). Shared by the tests of tests/deploy/."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from gateway.config.loader import VARIABLES
from tests.deploy.helm_render import Chart

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "deploy" / "compose"
CHART = ROOT / "deploy" / "helm" / "gateway"
SYSTEMD = ROOT / "deploy" / "systemd"

# Variables the gateway reads besides VARIABLES (docs/operations.md, "Environment variables"):
# the config file's name, and the secrets the loader takes from the environment itself.
READ_DIRECTLY = frozenset(
    {
        "GATEWAY_CONFIG",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "STRIPE_SECRET_KEY",
        "STRIPE_WEBHOOK_SECRET",
    }
)
GATEWAY_READS = frozenset(VARIABLES) | READ_DIRECTLY
# Python's own, set in the image (not the gateway's).
PYTHON_VARIABLES = frozenset({"PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"})


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip()[:1] == "#"]
    stages: list[list[tuple[str, str]]] = []
    for line in lines:
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word.upper(), rest.strip()))
    return stages[-1]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            for item in shlex.split(rest):
                name, _, value = item.partition("=")
                env[name] = value
    return env


def dockerfile_exec(instruction: str) -> list[str]:
    """An exec-form (JSON array) instruction's argv: ENTRYPOINT, CMD, or HEALTHCHECK's CMD."""
    (rest,) = [r for w, r in dockerfile_instructions() if w == instruction]
    if instruction == "HEALTHCHECK":
        rest = rest[rest.index(" CMD ") + len(" CMD ") :]
    argv = json.loads(rest)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def compose() -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def gateway_services(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose services that run the gateway's image, by name."""
    services: dict[str, dict[str, Any]] = document["services"]
    image = document["x-gateway"]["image"]
    return {name: s for name, s in services.items() if s.get("image") == image}


def env_example(path: Path) -> dict[str, str]:
    """NAME=value lines (comments and blank lines skipped)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", name), line
            pairs[name] = value
    return pairs


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` against `env`."""

    def one(match: re.Match[str]) -> str:
        name, op, word = match.groups()
        got = env.get(name, "")
        if not got and op == ":?":
            raise AssertionError(f"{name} is required: {word}")
        return got or (word if op == ":-" else "")

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:[-?])([^}]*))?\}", one, value)


def nginx_directives(text: str) -> list[tuple[tuple[str, ...], str, list[str]]]:
    """Every simple directive as (enclosing blocks, name, arguments): enough for nginx.conf's
    plain syntax (no quoted braces or semicolons)."""
    text = re.sub(r"#[^\n]*", "", text)
    out: list[tuple[tuple[str, ...], str, list[str]]] = []
    blocks: list[str] = []
    for token in re.findall(r"[^;{}]+[;{]|}", text):
        if token == "}":
            blocks.pop()
            continue
        words = shlex.split(token[:-1])
        if token.endswith("{"):
            blocks.append(" ".join(words))
        else:
            out.append((tuple(blocks), words[0], words[1:]))
    assert not blocks, "unbalanced braces"
    return out


def systemd_unit(name: str) -> configparser.ConfigParser:
    """A unit file as systemd reads it, closely enough: sections, keys (case kept), repeated
    keys allowed (the last one wins here; SystemCallFilter= repeats add up in systemd)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((SYSTEMD / name).read_text())
    return parser


def chart() -> Chart:
    return Chart(CHART)
