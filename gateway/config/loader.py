"""Load the gateway's configuration from one TOML file plus `GATEWAY_*` environment variables.

The file is read into a dict, the variables are merged into that dict, and the whole is
converted into `Config` (schema.py) at once by msgspec: each default is the struct's, each rule
its field's constraint. A bad configuration fails at start with one `ConfigError` that names the
file (or `environment` and the variable), the dotted key (`providers[1].base_url`) and what is
wrong (errors.py words msgspec's errors). The few checks across tables are here, after the
conversion. Secret values are never echoed. It only reads: no directories, no connections.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from actors.settings import DEFAULTS as ACTOR_DEFAULTS
from actors.settings import FIRE_AND_FORGET_KINDS, ActorSettings, inapplicable
from gateway.config.errors import ENVIRONMENT, ConfigError, translate
from gateway.config.schema import BillingConfig, Config, FilesConfig
from gateway.config.values import MasterKey, decode_custom, describe
from protocol.credentials import OPERATOR_PREFIX
from protocol.provider_keys import sendable_as_header

DEFAULT_FILE = "gateway.toml"
# Each variable and the key it overrides (an integer's digits are converted first).
VARIABLES = {
    "GATEWAY_DATA_DIR": "data_dir",
    "GATEWAY_DATABASE_URL": "database_url",
    "GATEWAY_REDIS_URL": "redis_url",
    "GATEWAY_HOST": "server.host",
    "GATEWAY_PORT": "server.port",
    "GATEWAY_WORKERS": "server.workers",
    "GATEWAY_MASTER_KEY": "master_key",
    "GATEWAY_PUBLIC_BASE_URL": "public_base_url",
    "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY": "bootstrap_management_key",
    "GATEWAY_LOG_LEVEL": "log_level",
    "GATEWAY_OPERATOR_KEY": "operator_keys",
    "GATEWAY_ENV": "environment",
}
_INTEGERS = frozenset({"GATEWAY_PORT", "GATEWAY_WORKERS"})
# Keys only the environment (or the loader) sets: in the file they are unknown.
_NOT_IN_FILE = (
    "source",
    "bootstrap_management_key",
    "operator_keys",
    "files.s3_access_key_id",
    "files.s3_secret_access_key",
    "environment",
    "billing.stripe_secret_key",
    "billing.stripe_webhook_secret",
)
OPERATOR_KEY_MIN_LENGTH = 32
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750's b64token


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Read the configuration: `path`, else `$GATEWAY_CONFIG`, else `./gateway.toml` if present.

    With none of them, the embedded defaults apply. `GATEWAY_*` variables in `environ` (default
    `os.environ`) override single values. Raises `ConfigError` for the first problem found.
    """
    env = os.environ if environ is None else environ
    source = _find_source(path, env)
    file = source or ""
    raw = _read_toml(source) if source is not None else {}
    for key in _NOT_IN_FILE:
        table, _, name = key.rpartition(".")
        holder = raw.get(table) if table else raw
        if isinstance(holder, dict) and name in holder:
            raise ConfigError(file, key, "unknown key")
    _actors(raw, file)
    if isinstance(raw.get("models"), list):  # `usd_per_image_by`: an inline table, held as pairs
        for model in raw["models"]:
            if isinstance(model, dict) and isinstance(model.get("usd_per_image_by"), dict):
                model["usd_per_image_by"] = list(model["usd_per_image_by"].items())
    variables = _merge_environment(raw, env)
    raw["source"] = source
    try:
        config = msgspec.convert(raw, Config, dec_hook=decode_custom)
    except msgspec.ValidationError as exc:
        raise translate(exc, file, raw, variables) from None
    return _checked(config, file, env)


def master_key_variable(environ: Mapping[str, str], name: str) -> bytes | None:
    """A master key from the variable `name` (unset or blank: None), else a ConfigError."""
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        return msgspec.convert(value, MasterKey)
    except msgspec.ValidationError as exc:
        raise translate(exc, ENVIRONMENT, value, {"": name}, MasterKey) from None


def _find_source(path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> str | None:
    if path is None:
        named = environ.get("GATEWAY_CONFIG", "")
        if not named:
            return DEFAULT_FILE if Path(DEFAULT_FILE).exists() else None
        path = named
    file = os.fspath(path)
    if not Path(file).exists():
        raise ConfigError(file, "", "file not found")
    return file


def _read_toml(file: str) -> dict[str, Any]:
    try:
        with open(file, "rb") as stream:
            return tomllib.load(stream)
    except FileNotFoundError as exc:
        raise ConfigError(file, "", "file not found") from exc
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read the file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(file, "", "not valid UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(file, "", str(exc)) from exc


def _actors(raw: dict[str, Any], file: str) -> None:
    """`[actors.<kind>]` tables over that kind's defaults (actors/settings.py), every kind.

    Converted one kind at a time: msgspec's error path does not name a dict's key."""
    actors = raw.get("actors", {})
    if not isinstance(actors, dict):
        return  # the conversion reports it
    for kind, table in actors.items():
        if kind not in ACTOR_DEFAULTS:
            known = ", ".join(sorted(ACTOR_DEFAULTS))
            raise ConfigError(file, f"actors.{kind}", f"unknown actor kind (known: {known})")
        if isinstance(table, dict):
            knobs, why = inapplicable(kind)
            for knob in table:
                if knob in knobs:
                    raise ConfigError(file, f"actors.{kind}.{knob}", f"does not apply: {why}")
            table = {**msgspec.structs.asdict(ACTOR_DEFAULTS[kind]), **table}
        try:
            actors[kind] = msgspec.convert(table, ActorSettings)
        except msgspec.ValidationError as exc:
            raise translate(exc, file, table, {}, ActorSettings, f"actors.{kind}") from None
    raw["actors"] = {**ACTOR_DEFAULTS, **actors}


def _merge_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """Set each given variable's value at its key in `raw`; answer {key: variable} for those."""
    merged = {}
    for variable, key in VARIABLES.items():
        value: object = environ.get(variable, "").strip()
        if not value:  # unset or blank: not overridden
            continue
        if variable == "GATEWAY_OPERATOR_KEY":
            value = _operator_keys(str(value))
        elif variable in _INTEGERS and re.fullmatch(r"[0-9]+", str(value)):
            value = int(str(value))  # else the conversion reports the text as given
        table, _, name = key.rpartition(".")
        target = raw.setdefault(table, {}) if table else raw
        if isinstance(target, dict):  # else the file's own error is reported
            target[name] = value
            merged[key] = variable
    return merged


def _operator_keys(value: str) -> list[str]:
    """One operator key, or several separated by commas (rotation: add the new one, move
    clients over, remove the old one). Problems name the key's position, never its text."""
    keys = [key.strip() for key in value.split(",")]
    for position, key in enumerate(keys, 1):
        where = f"key {position} of {len(keys)}" if len(keys) > 1 else "the key"
        problem = None
        if not key:
            problem = f"has an empty key at position {position} (a stray comma?)"
        elif not key.startswith(OPERATOR_PREFIX):
            problem = f'{where} must start with "{OPERATOR_PREFIX}"'
        elif len(key) < OPERATOR_KEY_MIN_LENGTH:
            problem = (
                f"{where} must be at least {OPERATOR_KEY_MIN_LENGTH} characters long, "
                f"got {len(key)} (e.g. {OPERATOR_PREFIX} and `openssl rand -hex 24`)"
            )
        elif not _BEARER_TOKEN.fullmatch(key):
            problem = (
                f"{where} may hold only ASCII letters, digits and - . _ ~ + / (and = at the "
                "end), as a bearer token"
            )
        if problem:
            raise ConfigError(ENVIRONMENT, "GATEWAY_OPERATOR_KEY", problem)
    return keys


def _checked(config: Config, file: str, environ: Mapping[str, str]) -> Config:
    """The checks across tables, and the values taken from variables the file names."""
    providers = []
    names: dict[str, str] = {}
    for index, provider in enumerate(config.providers):
        where = f"providers[{index}]"
        if provider.name in names:
            got, other = describe(provider.name), names[provider.name]
            raise ConfigError(
                file, f"{where}.name", f"duplicate provider name {got} (also {other})"
            )
        names[provider.name] = f"{where}.name"
        if provider.api_key_env is not None:
            if provider.api_key is not None:
                problem = "set either api_key or api_key_env, not both"
                raise ConfigError(file, f"{where}.api_key_env", problem)
            key = environ.get(provider.api_key_env) or None  # unset: keyless (or BYOK)
            if key is not None and not sendable_as_header(key):
                problem = "the variable's value must be visible ASCII characters only (no spaces"
                problem += " or controls): it is sent as a header"
                raise ConfigError(file, f"{where}.api_key_env", problem)
            provider = msgspec.structs.replace(provider, api_key=key)
        providers.append(provider)
    ids: dict[str, str] = {}
    for index, model in enumerate(config.models):
        where = f"models[{index}]"
        if model.id in ids:
            problem = f"duplicate model id {describe(model.id)} (also {ids[model.id]})"
            raise ConfigError(file, f"{where}.id", problem)
        ids[model.id] = f"{where}.id"
        served_by = [(f"{where}.provider", model.provider)] if model.provider else []
        served_by += [
            (f"{where}.deployments[{i}].provider", d.provider)
            for i, d in enumerate(model.deployments)
        ]
        for key, name in served_by:
            owner = next((p for p in providers if p.name == name), None)
            if owner is None:
                got, known = describe(name), ", ".join(sorted(names)) or "none"
                problem = f"no provider named {got} (configured providers: {known})"
                raise ConfigError(file, key, problem)
            if model.translations and owner.supports is not None and "audio" not in owner.supports:
                raise ConfigError(
                    file,
                    f"{where}.translations",
                    f'the provider {describe(owner.name)} does not list "audio" in its supports,'
                    " so this model cannot serve translations",
                )
    for index, model in enumerate(config.models):
        for i, fallback in enumerate(model.fallbacks):
            if fallback not in ids or fallback == model.id:
                problem = f"{describe(fallback)} is not the id of another [[models]] entry"
                raise ConfigError(file, f"models[{index}].fallbacks[{i}]", problem)
    default_model = config.images.default_model
    if default_model is not None and default_model not in ids:
        provider_name, slash, upstream = default_model.partition("/")
        if not (slash and upstream and provider_name in names):
            raise ConfigError(
                file,
                "images.default_model",
                f"no [[models]] entry has the id {describe(default_model)}, and it is not"
                " <provider>/<upstream model> of a configured provider",
            )
    _check_policies(config, file, names, ids)
    if config.fine_tuning.poll_max_s < config.fine_tuning.poll_initial_s:
        raise ConfigError(file, "fine_tuning.poll_max_s", "must be at least poll_initial_s")
    for kind, settings in config.actors.items():
        if settings.overflow == "drop_oldest" and kind not in FIRE_AND_FORGET_KINDS:
            raise ConfigError(
                file,
                f"actors.{kind}.overflow",
                '"drop_oldest" is only for actors whose senders need no answer'
                f" ({', '.join(sorted(FIRE_AND_FORGET_KINDS))})",
            )
    return msgspec.structs.replace(
        config,
        providers=tuple(providers),
        files=_s3_credentials(config, environ),
        billing=_stripe_secrets(config, environ),
    )


def _check_policies(
    config: Config, file: str, providers: Mapping[str, str], models: Mapping[str, str]
) -> None:
    """Guardrails, the cache and mirrors name providers and models that exist."""
    seen: set[str] = set()
    for index, guardrail in enumerate(config.guardrails):
        where = f"guardrails[{index}]"
        if guardrail.name in seen:
            problem = f"duplicate guardrail name {describe(guardrail.name)}"
            raise ConfigError(file, f"{where}.name", problem)
        seen.add(guardrail.name)
        if guardrail.provider is not None and guardrail.provider not in providers:
            problem = f"no provider named {describe(guardrail.provider)}"
            raise ConfigError(file, f"{where}.provider", problem)
        for i, name in enumerate(guardrail.models):
            if name != "*" and name not in models:
                problem = f"{describe(name)} is not the id of a [[models]] entry"
                raise ConfigError(file, f"{where}.models[{i}]", problem)
    cache = config.cache
    if cache.embeddings_model is not None and cache.embeddings_model not in models:
        problem = f"{describe(cache.embeddings_model)} is not the id of a [[models]] entry"
        raise ConfigError(file, "cache.embeddings_model", problem)
    if cache.store == "redis" and config.redis_url is None:
        raise ConfigError(file, "cache.store", '"redis" needs redis_url')
    for index, model in enumerate(config.models):
        for i, mirror in enumerate(model.mirrors):
            if mirror.model not in models or mirror.model == model.id:
                problem = f"{describe(mirror.model)} is not the id of another [[models]] entry"
                raise ConfigError(file, f"models[{index}].mirrors[{i}].model", problem)


def _stripe_secrets(config: Config, environ: Mapping[str, str]) -> BillingConfig:
    """`[billing]` with Stripe's secrets from the environment (payment_provider = "stripe"
    needs both), and the test processor refused in production while billing is on."""
    billing = config.billing
    if billing.payment_provider == "test":
        if config.environment == "production" and billing.enabled:
            raise ConfigError(
                ENVIRONMENT,
                "GATEWAY_ENV",
                'is "production", where payment_provider = "test" is refused: it credits'
                ' top-ups without taking any money (set [billing] payment_provider = "stripe")',
            )
        return billing
    secrets = {}
    for variable in ("STRIPE_SECRET_KEY", "STRIPE_WEBHOOK_SECRET"):
        value = environ.get(variable, "").strip()
        if not value:
            raise ConfigError(ENVIRONMENT, variable, 'is required with payment_provider = "stripe"')
        if not sendable_as_header(value):
            raise ConfigError(ENVIRONMENT, variable, "must be visible ASCII characters only")
        secrets[variable.lower().removeprefix("stripe_")] = value
    return msgspec.structs.replace(
        billing,
        stripe_secret_key=secrets["secret_key"],
        stripe_webhook_secret=secrets["webhook_secret"],
    )


def _s3_credentials(config: Config, environ: Mapping[str, str]) -> FilesConfig:
    """`[files]` with the S3 credentials from the standard AWS variables (store = "s3" only)."""
    if config.files.store != "s3":
        return config.files
    key_id = environ.get("AWS_ACCESS_KEY_ID", "").strip() or None
    secret = environ.get("AWS_SECRET_ACCESS_KEY", "").strip() or None
    if (key_id is None) != (secret is None):
        missing = "AWS_SECRET_ACCESS_KEY" if secret is None else "AWS_ACCESS_KEY_ID"
        raise ConfigError(ENVIRONMENT, missing, "must be set with its pair (or neither)")
    return msgspec.structs.replace(
        config.files, s3_access_key_id=key_id, s3_secret_access_key=secret
    )
