"""The IMEX config file (`KEY=VALUE` lines, `#` comments), parsed like `nvidia-imex -c` would.

A typo in a config the driver renders must fail loudly, naming file and line, so the fake
rejects what it cannot parse instead of guessing. Keys and defaults: the template the driver
renders (agent/templates/compute-domain-daemon-config.tmpl.cfg) and the config options of
NVIDIA's IMEX guide (https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from api.names import IMEX_CMD_PORT, IMEX_SERVER_PORT

DEFAULT_CONFIG_PATH: Final = Path("/etc/nvidia-imex/config.cfg")

# Every key the IMEX guide and the driver's template know; others are kept but reported.
KNOWN_KEYS: Final = frozenset(
    {
        "LOG_LEVEL",
        "LOG_FILE_NAME",
        "STATS_FILE_NAME",
        "LOG_APPEND_TO_LOG",
        "LOG_FILE_MAX_SIZE",
        "LOG_MAX_ROTATE_COUNT",
        "LOG_USE_SYSLOG",
        "DAEMONIZE",
        "BIND_INTERFACE_IP",
        "SERVER_PORT",
        "IMEX_NODE_CONFIG_FILE",
        "NETWORK_INTERFACE",
        "IMEX_WAIT_FOR_QUORUM",
        "IMEX_CONN_WAIT_TIMEOUT",
        "IMEX_ENABLE_AUTH_ENCRYPTION",
        "IMEX_AUTH_ENCRYPTION_MODE",
        "IMEX_AUTH_SOURCE",
        "IMEX_SERVER_KEY",
        "IMEX_SERVER_CERT",
        "IMEX_SERVER_CERT_AUTH",
        "IMEX_CLIENT_KEY",
        "IMEX_CLIENT_CERT",
        "IMEX_CLIENT_CERT_AUTH",
        "IMEX_SECURITY_TARGET_OVERRIDE",
        "IMEX_GSS_SERVICE_NAME",
        "IMEX_GSS_TIMEOUT_SEC",
        "IMEX_GSS_RETRY_INTERVAL_SEC",
        "IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC",
        "IMEX_GSS_SHUTDOWN_ON_FAILURE",
        "IMEX_CMD_ENABLED",
        "IMEX_CMD_BIND_INTERFACE_IP",
        "IMEX_CMD_PORT",
        "IMEX_CMD_UNIX_DOMAIN_PATH",
        "IMEX_NODE_DISCONNECTED_GRACE_TIME",
    }
)
QUORUM_MODES: Final = ("RECOVERY", "NONE", "FULL")
_KEY = re.compile(r"[A-Z][A-Z0-9_]*")


class ConfigError(Exception):
    """A config or nodes-config problem; the message names the file (and line)."""


@dataclass(frozen=True)
class ImexConfig:
    """The settings the fake acts on, plus every raw value and the line it came from."""

    source: Path
    log_level: int = 4
    log_file_name: str = ""
    log_append: bool = True
    daemonize: bool = False
    bind_interface_ip: str = ""
    server_port: int = IMEX_SERVER_PORT
    node_config_file: str = ""
    network_interface: str = ""
    wait_for_quorum: str = "RECOVERY"
    auth_encryption: bool = False
    cmd_enabled: bool = False
    cmd_bind_interface_ip: str = ""
    cmd_port: int | None = IMEX_CMD_PORT
    cmd_unix_domain_path: str = ""
    node_disconnected_grace_time: int = -1
    values: Mapping[str, str] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def unknown_keys(self) -> list[str]:
        return sorted(set(self.values) - KNOWN_KEYS)

    def where(self, key: str) -> str:
        """`file:line` of a key, or just the file when the key is absent."""
        line = self.lines.get(key)
        return f"{self.source}:{line}" if line else str(self.source)

    def node_config_path(self) -> Path:
        """The nodes config the daemon must read; an unset key or a missing file is an error."""
        if not self.node_config_file:
            raise ConfigError(
                f"{self.where('IMEX_NODE_CONFIG_FILE')}: IMEX_NODE_CONFIG_FILE is not set"
            )
        path = Path(self.node_config_file)
        if not path.is_file():
            raise ConfigError(
                f"{self.where('IMEX_NODE_CONFIG_FILE')}: IMEX_NODE_CONFIG_FILE "
                f"{self.node_config_file}: no such file"
            )
        return path


def load_config(path: Path) -> ImexConfig:
    """Read and parse a config file; an unreadable file is a ConfigError with the real wording."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(
            f"Unable to open configuration file at {path}: {exc.strerror or exc}"
        ) from exc
    return parse_config(text, Path(path))


def parse_config(text: str, source: Path) -> ImexConfig:
    """Parse config text; `source` only names the file in messages."""
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"{source}:{lineno}: expected KEY=VALUE, got {raw.strip()!r}")
        if not _KEY.fullmatch(key):
            raise ConfigError(f"{source}:{lineno}: invalid key {key!r}")
        values[key] = value.strip()
        lines[key] = lineno
    return _build(values, lines, source)


def _build(values: dict[str, str], lines: dict[str, int], source: Path) -> ImexConfig:
    def where(key: str) -> str:
        return f"{source}:{lines[key]}"

    def integer(key: str, default: int, low: int | None = None, high: int | None = None) -> int:
        raw = values.get(key, "")
        if raw == "":
            return default
        try:
            number = int(raw)
        except ValueError:
            raise ConfigError(f"{where(key)}: {key}={raw!r} is not an integer") from None
        if (low is not None and number < low) or (high is not None and number > high):
            raise ConfigError(f"{where(key)}: {key}={number} is out of range [{low}, {high}]")
        return number

    def flag(key: str, default: bool) -> bool:
        return bool(integer(key, int(default), 0, 1))

    def ip(key: str) -> str:
        raw = values.get(key, "")
        if raw:
            try:
                ipaddress.ip_address(raw)
            except ValueError:
                raise ConfigError(f"{where(key)}: {key}={raw!r} is not an IP address") from None
        return raw

    quorum = values.get("IMEX_WAIT_FOR_QUORUM", "") or "RECOVERY"
    if quorum not in QUORUM_MODES:
        raise ConfigError(
            f"{where('IMEX_WAIT_FOR_QUORUM')}: IMEX_WAIT_FOR_QUORUM={quorum!r} "
            f"is not one of {', '.join(QUORUM_MODES)}"
        )
    # An absent IMEX_CMD_PORT means the stock 50005; an explicitly empty one disables TCP.
    cmd_port: int | None = IMEX_CMD_PORT
    if "IMEX_CMD_PORT" in values:
        cmd_port = integer("IMEX_CMD_PORT", 0, 1, 65535) if values["IMEX_CMD_PORT"] else None
    return ImexConfig(
        source=source,
        log_level=integer("LOG_LEVEL", 4, 0, 5),
        log_file_name=values.get("LOG_FILE_NAME", ""),
        log_append=flag("LOG_APPEND_TO_LOG", True),
        daemonize=flag("DAEMONIZE", False),
        bind_interface_ip=ip("BIND_INTERFACE_IP"),
        server_port=integer("SERVER_PORT", IMEX_SERVER_PORT, 1, 65535),
        node_config_file=values.get("IMEX_NODE_CONFIG_FILE", ""),
        network_interface=values.get("NETWORK_INTERFACE", ""),
        wait_for_quorum=quorum,
        auth_encryption=flag("IMEX_ENABLE_AUTH_ENCRYPTION", False),
        cmd_enabled=flag("IMEX_CMD_ENABLED", False),
        cmd_bind_interface_ip=ip("IMEX_CMD_BIND_INTERFACE_IP"),
        cmd_port=cmd_port,
        cmd_unix_domain_path=values.get("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
        node_disconnected_grace_time=integer("IMEX_NODE_DISCONNECTED_GRACE_TIME", -1, -1),
        values=values,
        lines=lines,
    )
