"""The gateway's configuration: one TOML file plus `GATEWAY_*` environment variables.

schema.py      what a valid configuration is: msgspec Structs and their defaults
values.py      what a valid value is: the constrained types the Structs are written in
loader.py      where values come from (the file, `GATEWAY_*` variables), one conversion, the
               checks across tables
errors.py      `ConfigError` (file, key, problem), and msgspec's errors put in those terms
master_key.py  the master key (from the environment or the data dir)
"""

from gateway.config.errors import ConfigError
from gateway.config.loader import load_config
from gateway.config.schema import (
    BillingConfig,
    Config,
    FilesConfig,
    ImagesConfig,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    TelemetryConfig,
    WebhooksConfig,
)
from gateway.config.values import redact_url

__all__ = [
    "BillingConfig",
    "Config",
    "ConfigError",
    "FilesConfig",
    "ImagesConfig",
    "ModelConfig",
    "ProviderConfig",
    "ServerConfig",
    "TelemetryConfig",
    "WebhooksConfig",
    "load_config",
    "redact_url",
]
