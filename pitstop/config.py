"""Settings: one pydantic model, from `PITSTOP_*` environment variables and an optional TOML file.

Precedence (highest first): explicit arguments, environment, the TOML file, defaults.
The TOML file is `$PITSTOP_CONFIG`, else `$PITSTOP_HOME/config.toml` when it exists.
Nested sections use `__` in the environment: `PITSTOP_NOTIFY__URLS='["mailto://..."]'`.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


def default_home() -> Path:
    return Path(os.environ.get("PITSTOP_HOME") or Path.home() / ".pitstop").expanduser()


class Mode(StrEnum):
    OBSERVE = "observe"  # decide, record and notify; change nothing
    CANARY = "canary"  # act only on the listed partitions/nodes
    ACT = "act"


class NotifySettings(BaseModel):
    urls: list[str] = Field(default_factory=list, description="apprise URLs for operators")
    timeout_s: float = Field(default=10.0, gt=0, description="hard budget for one notification")
    on_success: bool = False


class WrapperSettings(BaseModel):
    attach_max_file_bytes: int = Field(default=5 * 1024 * 1024, ge=0)
    attach_max_total_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    log_excerpt_bytes: int = Field(default=64 * 1024, ge=1024, description="head+tail kept of a large log")
    stderr_tail_lines: int = Field(default=30, ge=0)


class SlurmSettings(BaseModel):
    bin_dir: Path | None = Field(default=None, description="where sinfo/scontrol live; PATH if unset")
    command_timeout_s: float = Field(default=30.0, gt=0)
    cluster_name: str = "default"


class SshSettings(BaseModel):
    user: str | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None
    trust_on_first_use: bool = False
    port: int = 22
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    max_concurrency: int = Field(default=32, ge=1)
    # logical node name -> "host[:port]" (dev clusters run several nodes on one host)
    addresses: dict[str, str] = Field(default_factory=dict)


class Settings(BaseSettings):
    """Everything Pitstop can be told. Build with `Settings()`; pass it down, never import a global."""

    model_config = SettingsConfigDict(
        env_prefix="PITSTOP_", env_nested_delimiter="__", extra="ignore"
    )

    home: Path = Field(default_factory=default_home)
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default sqlite:///$PITSTOP_HOME/pitstop.db"
    )
    dry_run: bool = False
    mode: Mode = Mode.OBSERVE
    cluster: str = Field(default="demo", description="cluster backend: slurm | demo")
    notify: NotifySettings = Field(default_factory=NotifySettings)
    wrapper: WrapperSettings = Field(default_factory=WrapperSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'pitstop.db'}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = config_file_path()
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)


def config_file_path() -> Path | None:
    explicit = os.environ.get("PITSTOP_CONFIG")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"PITSTOP_CONFIG points to {path}, which is not a readable file")
        return path
    candidate = default_home() / "config.toml"
    return candidate if candidate.is_file() else None


class ConfigError(RuntimeError):
    """Settings that cannot be loaded; the message says which file or variable is wrong."""


def load_settings(**overrides: Any) -> Settings:
    """Load settings, turning pydantic's validation errors into one readable message."""
    from pydantic import ValidationError

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid Pitstop settings ({problems})") from exc
