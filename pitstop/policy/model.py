"""The remediation policy as data: a pydantic model, loaded from YAML, with a built-in default.

A policy maps (cause, signature glob) to an ordered list of action templates, and holds every
safety number the decision function uses: approvals, retry limits, blast radius, storm guard,
escalation ladders, sticky/self-clearing faults and lemon thresholds. No I/O except `load_policy`.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pitstop.files import open_regular, read_at_most
from pitstop.models import GUESS_SIGNATURE_PREFIX, Cause
from pitstop.node.xid import XID_CATALOG
from pitstop.policy.locate import PolicyIssue, issues_from_errors, load_with_nodes, node_line, yaml_problem

DEFAULT_POLICY_RESOURCE = "default_policy.yaml"


class ActionKind(StrEnum):
    REQUEUE = "requeue"
    DRAIN = "drain"
    REBOOT = "reboot"
    GPU_RESET = "gpu_reset"
    RESUME = "resume"
    DIAG = "diag"
    RMA_TICKET = "rma_ticket"
    NOTIFY_USER = "notify_user"
    NOTIFY_OPS = "notify_ops"
    NONE = "none"


# Kinds that change a node in the scheduler or on the host: ownership, breaker and mode apply.
NODE_CHANGING = frozenset(
    {ActionKind.DRAIN, ActionKind.REBOOT, ActionKind.GPU_RESET, ActionKind.RESUME}
)
# Kinds aimed at a node (the faulty ones) rather than at the job or at people.
NODE_TARGETED = NODE_CHANGING | {ActionKind.DIAG, ActionKind.RMA_TICKET}
# Kinds that only tell people: they run in every mode, so observe mode still reports.
NOTIFYING = frozenset({ActionKind.NOTIFY_USER, ActionKind.NOTIFY_OPS, ActionKind.NONE})

# A rule step that means "whatever the node's escalation ladder says now".
ESCALATE = "escalate"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ActionTemplate(_Strict):
    """One step of a rule. In YAML either a bare kind (`drain`) or a one-key mapping
    (`diag: {level: 3}`, `requeue: {time_limit_factor: 1.5}`)."""

    kind: ActionKind | str = Field(description="an ActionKind, or 'escalate' for the ladder rung")
    level: int | None = Field(default=None, ge=1, le=4, description="diag level (DCGM -r)")
    exclude_faulty_nodes: bool = Field(default=True, description="requeue: exclude bad nodes")
    time_limit_factor: float | None = Field(default=None, gt=1.0, description="requeue")
    max_time_limit_min: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="requeue: e.g. NCCL_* overrides")
    after_diag_passes: bool = Field(default=False, description="resume only if diag passed")
    checks: list[str] = Field(
        default_factory=list,
        description="diag: node checks to run besides the quick one, e.g. [nccl] (burn-in before resume)",
    )

    @field_validator("checks")
    @classmethod
    def _known_checks(cls, v: list[str]) -> list[str]:
        # the registry is pure data: the names are checked here, the checks run on the node
        from pitstop.node.registry import CHECKS

        names = [n.strip().lower() for n in v if n.strip()]
        unknown = [n for n in names if n not in CHECKS]
        if unknown:
            raise ValueError(f"unknown node check(s) {', '.join(unknown)}; known checks: {', '.join(CHECKS)}")
        return list(dict.fromkeys(names))

    @model_validator(mode="after")
    def _checks_only_for_diag(self) -> "ActionTemplate":
        if self.checks and self.kind != ActionKind.DIAG:
            raise ValueError(f"'checks' belongs to a diag step, not to {self.kind}")
        return self

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: Any) -> ActionKind | str:
        if v == ESCALATE:
            return ESCALATE
        try:
            return ActionKind(v)
        except ValueError:
            known = ", ".join([k.value for k in ActionKind] + [ESCALATE])
            raise ValueError(f"unknown action {v!r}; known actions: {known}") from None

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"kind": data}
        if isinstance(data, dict) and "kind" not in data and len(data) == 1:
            (kind, params), = data.items()
            if params is None:
                params = {}
            if not isinstance(params, dict):
                # `diag: 3` is a natural thing to write
                params = {"level": params} if kind == "diag" else {"value": params}
            return {"kind": kind, **params}
        return data


class Rule(_Strict):
    """What to do for a cause, optionally narrowed to signatures matching a glob (`xid-4[89]`)."""

    cause: Cause
    signature: str | None = Field(default=None, description="fnmatch glob; None matches all")
    description: str = ""
    ladder: str | None = Field(default=None, description="name of the ladder `escalate` uses")
    max_same_failures: int | None = Field(
        default=None, ge=0, description="requeue at most this many times for the same failure"
    )
    ran_at_least_minutes: float | None = Field(
        default=None, gt=0,
        description="only for a job that ran this long before it failed (unknown run time: no match)",
    )
    actions: list[ActionTemplate] = Field(min_length=1)
    bucket: str | None = Field(default=None, description="set on rules made from `xid_buckets`")

    @model_validator(mode="after")
    def _run_time_rules_have_no_ladder(self) -> Rule:
        # The ladder counts a node's past incidents by their rule, and a past incident keeps no
        # run time: a ladder here would be climbed by some of its incidents and not others.
        if self.ran_at_least_minutes is not None and self.ladder is not None:
            raise ValueError(f"rule {self.cause.value}: a rule narrowed by ran_at_least_minutes "
                             "cannot use a ladder; put the ladder on the rule without it")
        return self

    def matches(self, cause: Cause, signature: str, ran_minutes: float | None = None) -> bool:
        if cause is not self.cause:
            return False
        if self.ran_at_least_minutes is not None and (ran_minutes is None or ran_minutes < self.ran_at_least_minutes):
            return False
        return self.signature is None or fnmatch.fnmatchcase(signature, self.signature)

    @property
    def rule_id(self) -> str:
        base = f"{self.cause.value}:{self.signature or '*'}"
        if self.ran_at_least_minutes is not None:
            base += f" (ran >= {self.ran_at_least_minutes:g} min)"
        return f"{base} (NVIDIA {self.bucket})" if self.bucket else base


class Ladder(_Strict):
    """Escalation per node: rung N is used when the same fault came back N times in the window."""

    window_hours: float = Field(default=72.0, gt=0)
    rungs: list[ActionTemplate] = Field(min_length=1)

    @field_validator("rungs")
    @classmethod
    def _no_nested_escalate(cls, rungs: list[ActionTemplate]) -> list[ActionTemplate]:
        if any(r.kind == ESCALATE for r in rungs):
            raise ValueError("a ladder rung cannot be 'escalate'")
        return rungs


class FaultBehaviour(StrEnum):
    STICKY = "sticky"  # keeps the node out until it passes diagnostics
    SELF_CLEARING = "self_clearing"  # damped: acts only on N occurrences in a window


class FaultClass(_Strict):
    signature: str = Field(description="fnmatch glob over signatures, e.g. xid-9[45]")
    behaviour: FaultBehaviour
    occurrences: int = Field(default=1, ge=1, description="self-clearing: act at this many")
    window_minutes: float = Field(default=60.0, gt=0)
    diag_level: int = Field(default=3, ge=1, le=4, description="sticky: diag needed to resume")


class XidBucketPlan(_Strict):
    """The default remediation for one of NVIDIA's Xid resolution buckets (the Xid catalog's
    immediate action, e.g. RESET_GPU). Applies to an `xid-N` signature that no rule names."""

    description: str = ""
    ladder: str | None = Field(default=None, description="name of the ladder `escalate` uses")
    max_same_failures: int | None = Field(default=None, ge=0)
    actions: list[ActionTemplate] = Field(min_length=1)
    behaviour: FaultBehaviour | None = Field(default=None, description="sticky | self_clearing")
    occurrences: int = Field(default=1, ge=1, description="self-clearing: act at this many")
    window_minutes: float = Field(default=60.0, gt=0)
    diag_level: int = Field(default=1, ge=1, le=4, description="sticky: diag needed to resume")


# The catalog's bucket names, for validating a policy's `xid_buckets` keys.
KNOWN_BUCKETS = frozenset(info.immediate for info in XID_CATALOG.values())
_XID_SIGNATURE = re.compile(r"xid-([0-9]{1,4})")


class BlastRadius(_Strict):
    """Beyond these an automatic drain is not refused but needs a human's approval."""

    max_partition_percent: float = Field(default=25.0, gt=0, le=100)
    max_nodes_per_hour: int = Field(default=4, ge=0)


class StormGuard(_Strict):
    """Circuit breakers: passing a limit opens the breaker; only a human closes it."""

    window_minutes: float = Field(default=60.0, gt=0)
    partition_max_drains: int | None = Field(default=8, ge=0)
    partition_max_percent: float | None = Field(default=50.0, gt=0, le=100)
    cluster_max_drains: int | None = Field(default=16, ge=0)
    cluster_max_percent: float | None = Field(default=20.0, gt=0, le=100)
    min_healthy_nodes: int = Field(default=1, ge=0, description="never drain the last N healthy")
    # On a small cluster one drain is already a big percentage (1 of 4 = 25 %): percentages only
    # count once this many nodes were drained in the window; the count limits always apply.
    percent_min_drains: int = Field(
        default=3, ge=1, description="percent limits apply from this many drains in the window"
    )


class SwitchStormRule(_Strict):
    """Jobs failing together on the nodes of one leaf switch: the switch, not the nodes.

    Llama 3's 54 days (Table 5) had 35 network switch/cable interruptions: a failed leaf ends every
    job cabled to it within minutes, and each job's log blames its own NIC. Draining node by node
    would take the leaf out one breaker trip at a time and ask a human per job; from
    `min_incidents` distinct jobs of these causes on one leaf in the window, they join one fabric
    incident: no node is drained, requeues keep off the leaf, ops are told once."""

    min_incidents: int = Field(default=3, ge=2, description="distinct failed jobs on one leaf, this one included")
    window_minutes: float = Field(default=30.0, gt=0)
    causes: set[Cause] = Field(default_factory=lambda: {Cause.NETWORK_FABRIC, Cause.NCCL_TIMEOUT})


class LemonThresholds(_Strict):
    """Meta's lemon-node signals over a window; any one reached flags the node."""

    window_days: float = Field(default=28.0, gt=0)
    distinct_failed_jobs: int = Field(default=5, ge=1)
    xid_count: int = Field(default=20, ge=1)
    tickets: int = Field(default=2, ge=1)
    node_fail_rate: float = Field(default=0.3, gt=0, le=1, description="node faults / jobs run")
    min_jobs_for_rate: int = Field(default=10, ge=1, description="rate ignored below this")


class Policy(_Strict):
    version: int = 1
    approval_required: set[ActionKind] = Field(
        default_factory=lambda: {ActionKind.REBOOT, ActionKind.RMA_TICKET}
    )
    reboot_drained_without_approval: bool = Field(
        default=True,
        description="a node this incident drained runs no new jobs: rebooting it needs no human",
    )
    max_same_failures: int = Field(default=2, ge=0, description="default requeue limit")
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    storm_guard: StormGuard = Field(default_factory=StormGuard)
    switch_storm: SwitchStormRule = Field(default_factory=SwitchStormRule)
    ladders: dict[str, Ladder] = Field(default_factory=dict)
    faults: list[FaultClass] = Field(default_factory=list)
    xid_buckets: dict[str, XidBucketPlan] = Field(
        default_factory=dict, description="NVIDIA resolution bucket -> default plan for its Xids"
    )
    handover_to: str = Field(
        default="ops", min_length=1,
        description="who owns a node Pitstop leaves drained with no pending step and no ticket",
    )
    lemon: LemonThresholds = Field(default_factory=LemonThresholds)
    rules: list[Rule] = Field(min_length=1)
    fallback: list[ActionTemplate] = Field(
        default_factory=lambda: [ActionTemplate(kind=ActionKind.NOTIFY_OPS)],
        description="used when no rule matches",
    )
    guesses: list[ActionTemplate] = Field(
        default_factory=lambda: [ActionTemplate(kind=ActionKind.NOTIFY_USER), ActionTemplate(kind=ActionKind.NOTIFY_OPS)],
        min_length=1,
        description=f"what to do for a verdict the classifier marks as a guess ({GUESS_SIGNATURE_PREFIX}*), "
                    "whatever its cause: only reporting kinds",
    )

    @model_validator(mode="after")
    def _ladders_exist(self) -> "Policy":
        for i, rule in enumerate(self.rules):
            uses = any(a.kind == ESCALATE for a in rule.actions)
            if uses and rule.ladder is None:
                raise ValueError(f"rules[{i}] ({rule.rule_id}) uses 'escalate' but names no ladder")
            if rule.ladder is not None and rule.ladder not in self.ladders:
                known = ", ".join(sorted(self.ladders)) or "none defined"
                raise ValueError(
                    f"rules[{i}] ({rule.rule_id}) names ladder {rule.ladder!r}; ladders: {known}"
                )
        acting = sorted({a.kind.value for a in self.guesses} - {k.value for k in NOTIFYING})
        if acting:
            raise ValueError(f"guesses may only report ({', '.join(sorted(k.value for k in NOTIFYING))}), "
                             f"not {', '.join(acting)}: a guess is below the precision an action needs")
        for name, plan in self.xid_buckets.items():
            if name not in KNOWN_BUCKETS:
                raise ValueError(
                    f"xid_buckets.{name}: not a resolution bucket of NVIDIA's Xid catalog; "
                    f"known: {', '.join(sorted(KNOWN_BUCKETS))}"
                )
            if any(a.kind == ESCALATE for a in plan.actions) and plan.ladder is None:
                raise ValueError(f"xid_buckets.{name} uses 'escalate' but names no ladder")
            if plan.ladder is not None and plan.ladder not in self.ladders:
                raise ValueError(f"xid_buckets.{name} names ladder {plan.ladder!r}, which is not defined")
        return self

    def bucket_for(self, signature: str) -> tuple[str, XidBucketPlan] | None:
        """NVIDIA's bucket for an `xid-N` signature, when this policy has a plan for it."""
        m = _XID_SIGNATURE.fullmatch(signature)
        info = XID_CATALOG.get(int(m.group(1))) if m else None
        if info is None or info.immediate not in self.xid_buckets:
            return None
        return info.immediate, self.xid_buckets[info.immediate]

    def rule_for(self, cause: Cause, signature: str, ran_minutes: float | None = None) -> Rule | None:
        """A rule naming the signature (first in file order), else the Xid's NVIDIA bucket plan,
        else the cause's catch-all rule: a specific rule always beats a catch-all. Rules narrowed
        by `ran_at_least_minutes` match only a job known to have run that long (`ran_minutes`).
        A guess (GUESS_SIGNATURE_PREFIX) gets `guesses`, whatever its cause."""
        if signature.startswith(GUESS_SIGNATURE_PREFIX):
            return Rule(cause=cause, signature=signature, actions=self.guesses,
                        description="the classifier's guess, below the precision an action needs: reported only")
        specific = next((r for r in self.rules
                         if r.signature is not None and r.matches(cause, signature, ran_minutes)), None)
        if specific is not None:
            return specific
        bucket = self.bucket_for(signature)
        if bucket is not None:
            name, plan = bucket
            return Rule(cause=cause, signature=signature, description=plan.description or f"NVIDIA {name}",
                        ladder=plan.ladder, max_same_failures=plan.max_same_failures,
                        actions=plan.actions, bucket=name)
        return next((r for r in self.rules if r.matches(cause, signature, ran_minutes)), None)

    def fault_for(self, signature: str) -> FaultClass | None:
        """A `faults` row matching the signature, else the Xid bucket's behaviour."""
        explicit = next((f for f in self.faults if fnmatch.fnmatchcase(signature, f.signature)), None)
        if explicit is not None:
            return explicit
        bucket = self.bucket_for(signature)
        if bucket is None or bucket[1].behaviour is None:
            return None
        plan = bucket[1]
        return FaultClass(signature=signature, behaviour=plan.behaviour, occurrences=plan.occurrences,
                          window_minutes=plan.window_minutes, diag_level=plan.diag_level)

    def uncovered_causes(self) -> list[Cause]:
        """Causes with no catch-all rule (they would fall back to `fallback`)."""
        return [c for c in Cause if not any(r.cause is c and r.signature is None for r in self.rules)]


class PolicyError(ValueError):
    """A policy that cannot be used. The message names the file and lists each problem with its
    line and field; `issues` holds the same as data (PolicyIssue: line, loc, msg) for
    `pitstop policy check` and the flows."""

    def __init__(self, source: str, issues: Sequence[PolicyIssue], message: str | None = None) -> None:
        self.source = source
        self.issues = list(issues)
        super().__init__(message or _describe(source, self.issues))

    def __reduce__(self):  # picklable (Prefect serialises a failed task's exception)
        return self.__class__, (self.source, self.issues, str(self))


class PolicyUnreadable(PolicyError):
    """The file itself cannot be read: missing, not a regular file, no permission."""


MAX_LISTED_ISSUES = 20  # in the message; `issues` has them all


def _describe(source: str, issues: Sequence[PolicyIssue]) -> str:
    lines = [f"invalid remediation policy {source}:"]
    for issue in issues[:MAX_LISTED_ISSUES]:
        where = f"line {issue.line}: " if issue.line is not None else ""
        field = f"{issue.dotted}: " if issue.loc else ""
        lines.append(f"  {where}{field}{issue.msg}")
    if len(issues) > MAX_LISTED_ISSUES:
        lines.append(f"  ... and {len(issues) - MAX_LISTED_ISSUES} more "
                     f"(`pitstop policy check {source}` lists them all)")
    return "\n".join(lines)


def _one(source: str, line: int | None, problem: str, message: str) -> PolicyError:
    """A problem with the file as a whole (`problem` for the issue list, `message` as text)."""
    return PolicyError(source, [PolicyIssue(line, (), problem)], message)


# What a document that is not a mapping is, in words.
_NOT_A_MAPPING = {type(None): "an empty document", list: "a list", str: "a plain string"}


# Parsed policies by (source, text): a flow reads the policy several times (decide, escalate,
# end states) and a burst runs hundreds of flows; one parse is ~50 ms of YAML and validation. The
# file is still read every time, so an edit takes effect at once; callers get their own copy.
_PARSED: dict[tuple[str, bytes], Policy] = {}
_PARSED_MAX = 16


def parse_policy(text: str | bytes, source: str = "<text>") -> Policy:
    """Parse YAML text into a Policy (see `_parse_policy`), once per distinct text."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    known = _PARSED.get((source, raw))
    if known is None:
        known = _parse_policy(text, source)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[(source, raw)] = known
    return known.model_copy(deep=True)


def _parse_policy(text: str | bytes, source: str = "<text>") -> Policy:
    """Parse YAML text into a Policy; every problem is a PolicyError naming `source`, with the
    line and field of each (all validation errors at once)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = text[: exc.start].count(b"\n") + 1
            why = f"{exc.reason} at byte {exc.start}"
            raise _one(source, line, f"not UTF-8 text ({why})",
                       f"policy {source} is not UTF-8 text ({why}, line {line})") from None
    try:
        data, root = load_with_nodes(text)
    except yaml.YAMLError as exc:
        line, why = yaml_problem(exc)
        problem = f"not valid YAML: {why}"
        raise _one(source, line, problem, f"policy {source} is {problem}" + (f" (line {line})" if line else "")) from None
    if not isinstance(data, dict):
        problem = f"must be a YAML mapping with at least 'rules', got {_NOT_A_MAPPING.get(type(data), type(data).__name__)}"
        raise _one(source, node_line(root), problem, f"policy {source} {problem}")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(source, issues_from_errors(exc.errors(), root, Policy)) from None


MAX_POLICY_BYTES = 1024 * 1024  # a policy is a page of YAML; anything huge is a mistake


def load_policy(path: Path | str | None = None) -> Policy:
    """Load the policy at `path`, or the built-in default when `path` is None.
    PolicyUnreadable when the file cannot be read; PolicyError when it is not a valid policy."""
    if path is None:
        text = resources.files("pitstop.policy").joinpath(DEFAULT_POLICY_RESOURCE).read_bytes()
        return parse_policy(text, source="(built-in default)")
    path = Path(path).expanduser()
    try:
        with open_regular(path) as stream:  # a FIFO or /dev/zero must not hang the loader
            size = os.fstat(stream.fileno()).st_size
            if size > MAX_POLICY_BYTES:
                raise _one(str(path), None, f"too big: {size} bytes, the limit is {MAX_POLICY_BYTES}",
                           f"policy {path} is {size} bytes; refusing more than {MAX_POLICY_BYTES}")
            raw = read_at_most(stream, MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise PolicyUnreadable(
            str(path), [PolicyIssue(None, (), f"cannot read: {exc.strerror or exc}")],
            f"cannot read policy {path}: {exc.strerror or exc}",
        ) from None
    if len(raw) > MAX_POLICY_BYTES:  # it grew while being read
        raise _one(str(path), None, f"too big: over {MAX_POLICY_BYTES} bytes",
                   f"policy {path} grew past {MAX_POLICY_BYTES} bytes while read; refusing more than that")
    return parse_policy(raw, source=str(path))


def policy_from_settings(settings: Any) -> Policy:
    return load_policy(settings.policy.file)
