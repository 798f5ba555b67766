"""Settings and store: the foundation every other layer stands on."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from pitstop.config import ConfigError, Mode, load_settings
from pitstop.store import SchemaError, Store
from pitstop.store.tables import Run, SchemaVersion


def test_settings_default_home_and_sqlite(isolated_home: Path) -> None:
    s = load_settings()
    assert s.home == isolated_home
    assert s.effective_database_url == f"sqlite:///{isolated_home / 'pitstop.db'}"
    assert s.mode is Mode.OBSERVE  # a new installation changes nothing until told to


def test_settings_env_and_toml(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "config.toml").write_text(
        'mode = "canary"\n[notify]\nurls = ["json://127.0.0.1:9/x"]\ntimeout_s = 3\n'
    )
    monkeypatch.setenv("PITSTOP_NOTIFY__TIMEOUT_S", "7")
    s = load_settings()
    assert s.mode is Mode.CANARY
    assert s.notify.urls == ["json://127.0.0.1:9/x"]
    assert s.notify.timeout_s == 7.0  # environment beats the file


def test_settings_bad_value_is_one_readable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_MODE", "yolo")
    with pytest.raises(ConfigError, match="mode"):
        load_settings()


def test_missing_explicit_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PITSTOP_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="nope.toml"):
        load_settings()


def test_store_roundtrip_and_schema_guard(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'p.db'}"
    store = Store(url)
    with store.session() as s:
        s.add(Run(id="r1", command=["echo", "hi"], cwd="/", host="h", user="u", run_dir="/x"))
        s.commit()
    store.dispose()
    store = Store(url)  # reopen: same schema, data kept
    with store.session() as s:
        assert s.exec(select(Run)).one().command == ["echo", "hi"]
        s.exec(select(SchemaVersion)).one().version = 999
        s.commit()
    store.dispose()
    with pytest.raises(SchemaError, match="upgrade Pitstop"):
        Store(url)
