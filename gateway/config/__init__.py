"""The gateway's configuration: one TOML file plus `GATEWAY_*` environment variables.

loader.py      where values come from (file, tables, environment) and where a problem is
schema.py      what a valid value is: the frozen dataclasses, defaults, one parser per kind
master_key.py  the master key (from the environment or the data dir)
"""

from gateway.config.loader import ConfigError, load_config
from gateway.config.schema import (
    BillingConfig,
    Config,
    FilesConfig,
    ImagesConfig,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    WebhooksConfig,
    redact_url,
)

__all__ = [
    "BillingConfig",
    "Config",
    "ConfigError",
    "FilesConfig",
    "ImagesConfig",
    "ModelConfig",
    "ProviderConfig",
    "ServerConfig",
    "WebhooksConfig",
    "load_config",
    "redact_url",
]
