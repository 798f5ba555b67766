"""The site's own rule file: rows an operator added (by hand or `pitstop rules suggest --accept`),
loaded after the built-in table.

    parse_site_rules(text, source, builtin) -> SiteRules   # pure; SiteRulesError with line/field
    load_site_rules(path, builtin) -> SiteRules            # a missing file is "no site rules"
    configured_table() -> RuleTable                        # what the classifier uses by default

Precedence: site rows are appended after the built-in rows and compete on priority like any
row (higher wins; at equal priority the earlier line wins; on the same line the built-in row,
which comes first, wins). A site row may not reuse a built-in signature (nor one a templated
built-in such as `xid-{1}` produces): site rows add, they never silently replace. Priority is
capped at 100, the top of the built-in hardware band.

A file that cannot be used never stops classification: `configured_table()` then gives the
built-in table and says why, and the CLI prints it.

    rules:
      - name: site-ldap-uid-missing          # the verdict's signature
        cause: environment
        pattern: 'getpwuid\\(\\): uid not found: [0-9]+'
        priority: 72
        hint: new node is missing LDAP users: fix sssd on it, requeue
        note: from incidents 12, 15         # optional, free text
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pitstop.files import open_regular, read_at_most
from pitstop.models import Cause

from classifiers.rule_model import Rule

MAX_SITE_RULES_BYTES = 1024 * 1024  # a page of YAML; anything huge is a mistake
MAX_SITE_PRIORITY = 100
MAX_PATTERN_CHARS = 2000
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")

log = logging.getLogger("pitstop.classifiers")


class SiteRule(BaseModel):
    """One row of the site rule file, as an operator writes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the verdict's signature: lower-case letters, digits, '.', '_', '-'")
    cause: Cause
    pattern: str = Field(description="one-line regex (the built-in table's subset), case-insensitive unless caseless: false")
    priority: int = Field(ge=1, le=MAX_SITE_PRIORITY)
    hint: str = Field(min_length=1, description="what an operator should do, in one line")
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    caseless: bool = True
    note: str = ""

    @field_validator("name")
    @classmethod
    def _slug(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a rule name: use lower-case letters, digits, '.', '_', '-' (at most 80)")
        return name

    @field_validator("cause")
    @classmethod
    def _names_a_cause(cls, cause: Cause) -> Cause:
        if cause is Cause.UNKNOWN:
            raise ValueError("'unknown' is what no rule decides; a rule must name a cause")
        return cause

    @field_validator("pattern")
    @classmethod
    def _usable_pattern(cls, pattern: str) -> str:
        return check_pattern(pattern)

    def to_rule(self) -> Rule:
        return Rule(signature=self.name, cause=self.cause, pattern=self.pattern, priority=self.priority,
                    hint=self.hint, confidence=self.confidence, caseless=self.caseless)


class SiteRuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[SiteRule] = Field(default_factory=list)


class SiteRules(BaseModel):
    source: str
    entries: list[SiteRule] = Field(default_factory=list)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(e.to_rule() for e in self.entries)


class SiteRulesError(ValueError):
    """A site rule file that cannot be used; `issues` (pitstop.policy.locate.PolicyIssue) name
    the line and field of each problem."""

    def __init__(self, source: str, issues: Sequence) -> None:
        self.source = source
        self.issues = list(issues)
        lines = [f"site rule file {source} is not usable (the built-in rules still apply):"]
        lines += [f"  {issue.render(source)}" for issue in self.issues[:20]]
        if len(self.issues) > 20:
            lines.append(f"  ... and {len(self.issues) - 20} more (`pitstop rules check` lists them all)")
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return self.__class__, (self.source, self.issues)


def check_pattern(pattern: str) -> str:
    """The pattern if every engine can use it the same way; else ValueError saying why."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
    try:
        Rule(signature="check", cause=Cause.UNKNOWN, pattern=pattern, priority=0, hint="-")
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    if re.compile(pattern, re.IGNORECASE).search("") is not None:
        raise ValueError(f"pattern {pattern!r} matches an empty line, so it would match every line")
    _engine_accepts(pattern)
    return pattern


def _engine_accepts(pattern: str) -> None:
    """Hyperscan (the engine used where it loads) must compile it too: it rejects what `re` takes
    (back-references, some repeats). Without Hyperscan installed there is nothing more to check."""
    try:
        import hyperscan
    except ImportError:
        return
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[pattern.encode()], ids=[0], elements=1,
                   flags=[hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_CASELESS])
    except hyperscan.error as exc:
        raise ValueError(f"pattern {pattern!r} is refused by Hyperscan: {str(exc).split('WARNING:')[0].strip()}") from None


def _builtin_names(builtin: Sequence[Rule]) -> tuple[set[str], list[re.Pattern[str]]]:
    fixed = {r.signature for r in builtin if "{1}" not in r.signature}
    templated = [re.compile(re.escape(prefix) + r".+" + re.escape(suffix))
                 for prefix, _, suffix in (r.signature.partition("{1}") for r in builtin if "{1}" in r.signature)]
    return fixed, templated


def _one(source: str, line: int | None, msg: str) -> SiteRulesError:
    from pitstop.policy.locate import PolicyIssue

    return SiteRulesError(source, [PolicyIssue(line, (), msg)])


def parse_site_rules(text: str | bytes, source: str, builtin: Sequence[Rule]) -> SiteRules:
    """Validate a site rule file; every problem (all at once) with its line and field."""
    # Imported here: the classifier's start-up (every `pitstop classify`) reads no YAML.
    import yaml

    from pitstop.policy.locate import PolicyIssue, issues_from_errors, load_with_nodes, locate, node_line, yaml_problem

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _one(source, text[: exc.start].count(b"\n") + 1, f"not UTF-8 text ({exc.reason})") from None
    try:
        data, root = load_with_nodes(text)
    except yaml.YAMLError as exc:
        line, why = yaml_problem(exc)
        raise _one(source, line, f"not valid YAML: {why}") from None
    if data is None:
        return SiteRules(source=source)
    if not isinstance(data, dict):
        raise _one(source, node_line(root), f"must be a mapping with a 'rules' list, got {type(data).__name__}")
    try:
        parsed = SiteRuleFile.model_validate(data)
    except ValidationError as exc:
        raise SiteRulesError(source, issues_from_errors(exc.errors(), root, SiteRuleFile)) from None
    fixed, templated = _builtin_names(builtin)
    issues: list[PolicyIssue] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(parsed.rules):
        loc = ("rules", index, "name")
        if entry.name in fixed or any(t.fullmatch(entry.name) for t in templated):
            issues.append(PolicyIssue(locate(root, loc).line, loc,
                                      f"{entry.name!r} is a built-in rule's name; site rules add, they never replace: "
                                      "pick another name (e.g. site-...)"))
        elif entry.name in seen:
            issues.append(PolicyIssue(locate(root, loc).line, loc,
                                      f"{entry.name!r} is also the name of rules[{seen[entry.name]}]; names must be unique"))
        seen.setdefault(entry.name, index)
    if issues:
        raise SiteRulesError(source, issues)
    return SiteRules(source=source, entries=parsed.rules)


def load_site_rules(path: Path, builtin: Sequence[Rule]) -> SiteRules:
    """The rules in `path`; none when it does not exist. SiteRulesError when it cannot be used."""
    source = str(path)
    try:
        with open_regular(path) as stream:  # a FIFO or /dev/zero must not hang classification
            raw = read_at_most(stream, MAX_SITE_RULES_BYTES + 1)
    except FileNotFoundError:
        return SiteRules(source=source)
    except OSError as exc:
        raise _one(source, None, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SITE_RULES_BYTES:
        raise _one(source, None, f"larger than {MAX_SITE_RULES_BYTES} bytes; refusing it")
    return parse_site_rules(raw, source, builtin)


HEADER = "# Pitstop site rules, loaded after the built-in table (`pitstop rules check` validates this file).\n"
_RULES_KEY = re.compile(r"^rules[ \t]*:[ \t]*(\[[ \t]*\])?[ \t]*(#.*)?$", re.MULTILINE)


def render_rule(entry: SiteRule) -> list[str]:
    """One rule as the lines of a YAML list item ("- name: ...", "  cause: ...")."""
    import yaml

    return yaml.safe_dump([entry.model_dump(mode="json")], sort_keys=False, allow_unicode=True,
                          width=1000).splitlines()


def append_rule(existing: str, entry: SiteRule) -> str:
    """The file text with `entry` appended to its `rules:` list, comments and layout kept.
    ValueError when the list is not in block style (then the rule is added by hand)."""
    if not existing.strip():
        return HEADER + "rules:\n" + "".join("  " + line + "\n" for line in render_rule(entry))
    key = _RULES_KEY.search(existing)
    if key is None:
        raise ValueError("it has no top-level 'rules:' line followed by a block list")
    if key.group(1):  # `rules: []`: the list starts now
        existing = existing[: key.start()] + "rules:" + (f"  {key.group(2)}" if key.group(2) else "") + existing[key.end():]
        key = _RULES_KEY.search(existing)
    items = re.findall(r"^([ \t]*)- ", existing[key.end():], re.MULTILINE)
    indent = items[0] if items else "  "
    return existing.rstrip("\n") + "\n" + "".join(indent + line + "\n" for line in render_rule(entry))


# --- the table the classifier uses by default -------------------------------------------------


class RuleTable(BaseModel):
    """Built-in rows, then the site's; `problem` says why the site file was left out, if it was."""

    model_config = ConfigDict(frozen=True)

    rules: tuple[Rule, ...]
    site_source: str | None = None
    site_count: int = 0
    problem: str | None = None


def configured_path() -> Path | None:
    """The site rule file the settings name (`Settings.site_rules_path`); None when the settings
    themselves are unusable. Without a config file only the environment can name it: that case
    skips importing pydantic-settings (0.2 s on every `pitstop classify`), mirroring
    pitstop.config.default_home / config_file_path (tests/classifiers/test_site_rules.py checks)."""
    explicit = os.environ.get("PITSTOP_CLASSIFIER__SITE_RULES")
    home = Path(os.environ.get("PITSTOP_HOME") or Path.home() / ".pitstop").expanduser()
    if not os.environ.get("PITSTOP_CONFIG") and not (home / "config.toml").is_file():
        return Path(explicit).expanduser() if explicit else home / "site-rules.yaml"
    from pitstop.config import ConfigError, load_settings

    try:
        return load_settings().site_rules_path
    except ConfigError:
        return None


def _stat_key(path: Path | None) -> tuple:
    if path is None:
        return ()
    try:
        st = os.stat(path)
    except OSError:
        return ("absent",)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# (path, its stat, id of the built-in table) -> (that table, the combined one). Keyed by identity:
# hashing the built-in table on every classification would cost more than the stat.
_TABLES: dict[tuple, tuple[tuple[Rule, ...], RuleTable]] = {}


def table_for(path: Path | None, builtin: tuple[Rule, ...]) -> RuleTable:
    """Built-in + site rows from `path`, re-read only when the file changes."""
    key = (path, _stat_key(path), id(builtin))
    cached = _TABLES.get(key)
    if cached is None or cached[0] is not builtin:
        if len(_TABLES) >= 8:
            _TABLES.clear()
        cached = _TABLES[key] = (builtin, _table(path, builtin))
    return cached[1]


def _table(path: Path | None, builtin: tuple[Rule, ...]) -> RuleTable:
    if path is None:
        return RuleTable(rules=builtin)
    try:
        site = load_site_rules(path, builtin)
    except SiteRulesError as exc:
        log.warning("%s", exc)
        return RuleTable(rules=builtin, site_source=str(path), problem=str(exc))
    return RuleTable(rules=(*builtin, *site.rules), site_source=str(path), site_count=len(site.entries))


# Settings are read at most this often per process: the environment names the file; the file's
# own changes are seen at once (its stat is checked on every call).
@lru_cache(maxsize=8)
def _path_for_env(_env: tuple) -> Path | None:
    return configured_path()


def configured_table(builtin: tuple[Rule, ...]) -> RuleTable:
    env = tuple(os.environ.get(k) for k in ("PITSTOP_HOME", "PITSTOP_CONFIG", "PITSTOP_CLASSIFIER__SITE_RULES"))
    return table_for(_path_for_env(env), builtin)
