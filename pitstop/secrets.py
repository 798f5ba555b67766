"""Mask the secrets in apprise (and database) URLs before a URL is written or printed anywhere.

A notification URL carries its credentials in many places: `user:pass@`, `?pass=`, `?token=`,
or the path itself (`slack://TokenA/TokenB/TokenC`, `discord://id/token`, `tgram://bottoken/chat`,
`https://hooks.slack.com/services/T../B../XXX`). Where each form keeps its secret is data
(`PATH_FORMS`, `SECRET_QUERY_KEYS`); every other URL gets its token-looking path segments masked.

    redact("mailto://u:pw@host?pass=pw2")     -> "mailto://u:***@host?pass=***"
    scrub(text, urls)  # every URL in `text` redacted, and any secret of `urls` quoted bare
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import unquote

MASK = "***"

# Query parameters whose value is a credential (compared lower-case).
SECRET_QUERY_KEYS = frozenset({
    "pass", "password", "passwd", "pwd", "secret", "client_secret",
    "token", "access_token", "accesstoken", "auth", "authorization",
    "key", "apikey", "api_key", "app_key", "appkey", "sig", "signature",
})


class PathForm(NamedTuple):
    """Where one kind of URL keeps its secrets, besides `user:pass@` and the query."""

    name: str
    scheme: str  # lower case
    host: str | None  # the host it applies to (https:// webhooks); None: any host
    secret_host: bool  # the host part is itself a token (slack://TokenA/..., tgram://123:ABC/...)
    secret_segments: slice  # which path segments are secret
    public_marks: str = ""  # segments starting with one of these are names, not secrets (#chan)


ALL = slice(0, None)
NONE = slice(0, 0)

PATH_FORMS: tuple[PathForm, ...] = (
    PathForm("Slack app/bot", "slack", None, True, ALL, "#@+"),  # slack://TokenA/TokenB/TokenC/#chan
    PathForm("Slack webhook", "https", "hooks.slack.com", False, slice(1, None)),  # /services/T/B/X
    PathForm("Discord", "discord", None, False, ALL),  # discord://webhook_id/webhook_token
    PathForm("Discord webhook", "https", "discord.com", False, slice(2, None)),  # /api/webhooks/ID/TOKEN
    PathForm("Discord webhook", "https", "discordapp.com", False, slice(2, None)),
    PathForm("Telegram", "tgram", None, True, NONE),  # tgram://bottoken/chat_id
    PathForm("Telegram API", "https", "api.telegram.org", False, slice(0, 1)),  # /bot<token>/...
    PathForm("Microsoft Teams", "msteams", None, True, ALL),  # msteams://TokenA/TokenB/TokenC
    PathForm("Teams webhook", "https", "outlook.office.com", False, slice(1, None)),  # /webhook/...
    PathForm("Gotify", "gotify", None, False, slice(-1, None)),  # gotify://host/token
    PathForm("Gotify", "gotifys", None, False, slice(-1, None)),
    PathForm("Pushover", "pover", None, True, NONE),  # pover://user@token
    PathForm("Pushbullet", "pbul", None, True, ALL),  # pbul://accesstoken/...
    PathForm("SQLite", "sqlite", None, False, NONE),  # a file path: nothing in it is a token
    PathForm("file", "file", None, False, NONE),
)

# Any other URL: a path segment that looks like a token (long, letters and digits) is masked.
_TOKEN_LIKE = re.compile(r"(?=[^/]*[0-9])(?=[^/]*[A-Za-z])[A-Za-z0-9_\-.~%]{20,}")

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A URL inside free text (a warning, an error): up to whitespace or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_TRAILING = ".,;:)]}!"  # punctuation after a URL in a sentence, not part of it
MIN_SECRET_CHARS = 6  # shorter values are not scrubbed from free text (they would hit words)


def _form(scheme: str, host: str) -> PathForm | None:
    host = host.lower()
    return next(
        (f for f in PATH_FORMS if f.scheme == scheme and (f.host is None or host == f.host or host.endswith("." + f.host))),
        None,
    )


def secret_spans(url: str) -> list[tuple[int, int]]:
    """(start, end) of every secret in `url`, in order and not overlapping."""
    spans: list[tuple[int, int]] = []
    m = _SCHEME.match(url)
    query_at = url.find("?")
    if m is not None:
        scheme = url[: m.end() - 3].lower()
        start = m.end()
        end = len(url) if query_at < 0 else query_at
        slash = url.find("/", start, end)
        authority_end = end if slash < 0 else slash
        at = url.rfind("@", start, authority_end)
        host_start = start
        if at >= 0:
            colon = url.find(":", start, at)
            if colon >= 0 and colon + 1 < at:
                spans.append((colon + 1, at))  # user:PASSWORD@
            host_start = at + 1
        host = url[host_start:authority_end]
        form = _form(scheme, host.split(":")[0])
        if form is not None and form.secret_host and host and host[0] not in form.public_marks:
            spans.append((host_start, authority_end))
        spans += _path_spans(url, authority_end, end, form)
    if query_at >= 0:
        spans += _query_spans(url, query_at + 1)
    return spans


def _path_spans(url: str, start: int, end: int, form: PathForm | None) -> list[tuple[int, int]]:
    segments = []  # (start, end) of each non-empty path segment
    pos = start
    while pos < end:
        nxt = url.find("/", pos + 1, end)
        nxt = end if nxt < 0 else nxt
        if nxt > pos + 1:
            segments.append((pos + 1, nxt))
        pos = nxt
    if form is None:
        return [(a, b) for a, b in segments if _TOKEN_LIKE.fullmatch(url, a, b)]
    chosen = segments[form.secret_segments]
    return [(a, b) for a, b in chosen if not (form.public_marks and url[a] in form.public_marks)]


def _query_spans(url: str, start: int) -> list[tuple[int, int]]:
    spans = []
    for m in re.finditer(r"([^&=#]+)=([^&#]*)", url[start:]):
        if unquote(m.group(1)).strip().lower() in SECRET_QUERY_KEYS and m.group(2):
            spans.append((start + m.start(2), start + m.end(2)))
    return spans


def redact(url: str) -> str:
    """`url` with every secret replaced by ***; the rest (scheme, host, user, channel) kept."""
    out, last = [], 0
    for a, b in secret_spans(url):
        out += [url[last:a], MASK]
        last = b
    return "".join(out) + url[last:]


def secrets_of(url: str) -> list[str]:
    """The secret values in `url`, as written and percent-decoded."""
    values = []
    for a, b in secret_spans(url):
        raw = url[a:b]
        values += [raw, unquote(raw)]
    return [v for v in dict.fromkeys(values) if len(v) >= MIN_SECRET_CHARS]


def redact_text(text: str) -> str:
    """Every URL inside free text redacted (trailing punctuation stays outside the URL)."""

    def one(m: re.Match[str]) -> str:
        found = m.group(0)
        url = found.rstrip(_TRAILING)
        return redact(url) + found[len(url):]

    return _URL_IN_TEXT.sub(one, text)


def scrub(text: str, urls: Iterable[str] = ()) -> str:
    """`redact_text`, and also any secret of `urls` that appears bare (apprise's messages can
    quote a token or a password without its URL)."""
    text = redact_text(text)
    for secret in sorted({s for u in urls for s in secrets_of(u)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
