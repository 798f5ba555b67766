"""Secrets in notification URLs never reach a file, the store, a table or stderr, in any URL form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.secrets import redact, redact_text, scrub, secrets_of

# (url, what it must look like once redacted)
FORMS = [
    ("mailtos://user:hunter22@smtp.example.com?to=ops@example.com",
     "mailtos://user:***@smtp.example.com?to=ops@example.com"),
    ("mailto://u:SECRET@127.0.0.1:1?pass=SECRET2", "mailto://u:***@127.0.0.1:1?pass=***"),
    ("mailto://smtp.example.com?user=ops&password=hunter22&to=a@example.com",
     "mailto://smtp.example.com?user=ops&password=***&to=a@example.com"),
    ("ntfy://ntfy.example.com/topic?token=tk_abcdef123", "ntfy://ntfy.example.com/topic?token=***"),
    ("json://hooks.example.com/notify?KEY=abcdef&x=1", "json://hooks.example.com/notify?KEY=***&x=1"),
    ("ifttt://webhook?apikey=k3y-value", "ifttt://webhook?apikey=***"),
    ("xml://hooks.example.com/?secret=s3cr3t-value&to=ops", "xml://hooks.example.com/?secret=***&to=ops"),
    ("slack://TokenA/TokenB/TokenC", "slack://***/***/***"),
    ("slack://bot@TokenA/TokenB/TokenC/#general/@oncall", "slack://bot@***/***/***/#general/@oncall"),
    ("slack://xoxb-1234-1234-abc123def/#ops", "slack://***/#ops"),
    ("https://hooks.slack.com/services/T0123ABCD/B0123ABCD/XXXXXXXXXXXXXXXXXXXXXXXX",
     "https://hooks.slack.com/services/***/***/***"),
    ("discord://webhook_id/webhook_token", "discord://webhook_id/***"),
    ("discord://avatar@1234567890/tok-en_value", "discord://avatar@1234567890/***"),
    ("https://discord.com/api/webhooks/1234567890/abcdefTOKEN", "https://discord.com/api/webhooks/***/***"),
    ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/-100123456/",
     "tgram://***/-100123456/"),
    ("https://api.telegram.org/bot123456:ABCdef/sendMessage", "https://api.telegram.org/***/sendMessage"),
    ("msteams://TokenA/TokenB/TokenC/", "msteams://***/***/***/"),
    ("gotify://gotify.example.com/AbCdEfGh12", "gotify://gotify.example.com/***"),
    ("json://hooks.example.com/v1/a1b2c3d4e5f6a7b8c9d0e1f2/notify",
     "json://hooks.example.com/v1/***/notify"),  # a token-looking path segment, any scheme
    ("postgresql://pitstop:dbpass99@db.example.com:5432/pitstop",
     "postgresql://pitstop:***@db.example.com:5432/pitstop"),
]

# URLs with nothing secret in them come back unchanged.
PLAIN = [
    "mailto://ops@example.com",
    "sqlite:////var/lib/pitstop/pitstop.db",
    "sqlite:////scratch/runs/20261203T143019139Z-7ba8b5/pitstop.db",  # a path, not a token
    "https://example.com/docs/runbook?section=xid&to=ops",
    "json://hooks.example.com/pitstop/incident",
    "slack://#general",
]


@pytest.mark.parametrize("url,expected", FORMS, ids=[f[0].split(":")[0] + str(i) for i, f in enumerate(FORMS)])
def test_every_url_form_is_masked(url: str, expected: str) -> None:
    assert redact(url) == expected
    for secret in secrets_of(url):
        assert secret not in redact(url)
    assert redact(redact(url)) == expected  # masking twice changes nothing


@pytest.mark.parametrize("url", PLAIN)
def test_urls_without_secrets_are_unchanged(url: str) -> None:
    assert redact(url) == url and secrets_of(url) == []


def test_text_quoting_urls_is_masked_and_punctuation_kept() -> None:
    text = ("not delivered to 2 of 2 URL(s): mailto://u:SECRET@127.0.0.1:1?pass=SECRET2: refused; "
            "(slack://TokenA/TokenB/TokenC), done.")
    assert redact_text(text) == ("not delivered to 2 of 2 URL(s): mailto://u:***@127.0.0.1:1?pass=***: refused; "
                                 "(slack://***/***/***), done.")


def test_scrub_also_masks_a_secret_quoted_without_its_url() -> None:
    url = "discord://1234567890/s3cretTOKEN%2Fx"
    text = "HTTP 401 for token s3cretTOKEN/x (s3cretTOKEN%2Fx); the webhook was discord://1234567890/s3cretTOKEN%2Fx"
    out = scrub(text, [url])
    assert "s3cret" not in out and out.endswith("discord://1234567890/***")
    # short values would hit ordinary words: `pw` stays in "upward", masked inside the URL only
    assert scrub("moved upward mailto://u:pw@h", ["mailto://u:pw@h"]) == "moved upward mailto://u:***@h"


def test_notify_outcome_carries_no_secret() -> None:
    from pitstop.notify import Notification, send

    urls = [
        "mailto://u:SECRET@127.0.0.1:1?pass=SECRET2",  # apprise refuses this one
        "mailto://127.0.0.1:1?user=u&pass=SECRET3&to=a@example.com&from=b@example.com",  # refused port
        "json://127.0.0.1:1/hook/SECRET4a1b2c3d4e5f6g7?token=SECRET5",
    ]
    outcome = send(Notification(subject="s", body="b"), urls, timeout_s=30)
    dumped = outcome.model_dump_json()
    assert outcome.status.value == "failed" and len(outcome.urls) == 3
    assert "SECRET" not in dumped, dumped
    assert outcome.urls[0].url == "mailto://u:***@127.0.0.1:1?pass=***"


def test_runs_view_masks_old_records() -> None:
    from pitstop.cli.runs_view import RunView

    view = RunView(id="x", notify_status="failed: slack://TokenA/TokenB/TokenC: 404",
                   error="mailto://h?pass=SECRET9")
    assert "Token" not in view.notify_status and "SECRET9" not in view.error


def _pitstop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args],
                          capture_output=True, timeout=180)


def test_a_wrapped_run_leaves_no_secret_anywhere(isolated_home: Path) -> None:
    secrets = [b"SECRET", b"SECRET2", b"SECRET3", b"SECRET4a1b2c3d4e5f6g7", b"SECRET5"]
    urls = [
        "mailto://u:SECRET@127.0.0.1:1?pass=SECRET2",
        "mailto://127.0.0.1:1?user=u&pass=SECRET3&to=a@example.com&from=b@example.com",
        "json://127.0.0.1:1/hook/SECRET4a1b2c3d4e5f6g7?token=SECRET5",
    ]
    args = [a for u in urls for a in ("--notify", u)]
    done = _pitstop("run", *args, "--", "false")
    assert done.returncode == 1, done.stderr
    assert b"notification" in done.stderr  # the warning is there, masked
    assert b"SECRET" not in done.stderr, done.stderr
    run_dirs = list((isolated_home / "runs").iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "notify.json").is_file() and (run_dirs[0] / "result.json").is_file()
    assert "***" in json.loads((run_dirs[0] / "notify.json").read_text())["urls"][0]["url"]
    files = [p for p in isolated_home.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in files)  # the store is one of the files searched
    for path in files:
        data = path.read_bytes()
        leaked = [s for s in secrets if s in data]
        assert not leaked, f"{leaked} in {path}"
    run_id = run_dirs[0].name
    for shown in (_pitstop("runs"), _pitstop("runs", "show", run_id), _pitstop("runs", "show", run_id, "--json")):
        assert shown.returncode == 0, shown.stderr
        assert b"SECRET" not in shown.stdout + shown.stderr
