"""Who handles an interruption, and what it costs in time: Pitstop (the real `decide` and the real
escalation functions) or a human alone. Both return a `Handling` the engine turns into time.

Pitstop's plan is carried out step by step on a clock, as tasks/remediate.py runs it: in plan
order, an approval pauses everything after it, a denied drain skips that node's later steps,
then the escalation ladder climbs while a rung or its check fails. The node's hidden need
(`Pool.bad`) decides each outcome: a GPU reset fails on a GPU that needs more, a check passes
only once the need is cleared (a level 1-2 check can miss a part that must be replaced).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from pitstop.cluster.base import JobRecord
from pitstop.config import Mode
from pitstop.models import Verdict
from pitstop.policy.decide import Decision, PlannedAction, decide
from pitstop.policy.escalation import EndState, StepOutcome, extend_decision, next_rung_steps, node_end_states
from pitstop.policy.model import NODE_TARGETED, NOTIFYING, ActionKind, Policy
from pitstop.policy.safety import ModeState, Owner
from pitstop.simulate import humans
from pitstop.simulate.memory import Memory, at
from pitstop.simulate.params import STRENGTH, Blame, Category, Need, Repair, SimParams
from pitstop.simulate.pool import Pool

MAX_ROUNDS = 8  # as tasks/remediate.py: the plan plus escalations
# What each fix step clears (Need strength): a reset, a reboot; a repair clears everything.
_FIX_STRENGTH = {ActionKind.GPU_RESET: STRENGTH[Need.RESET], ActionKind.REBOOT: STRENGTH[Need.REBOOT]}
_REPAIR = STRENGTH[Need.REPLACE]
_ACT = ModeState(mode=Mode.ACT)


@dataclass
class Handling:
    """What one interruption's handling means for the job."""

    restart_at: float  # when the job is requeued (it may still wait for nodes)
    human_minutes: float  # of the downtime before `restart_at`, how much waited for a person
    requeued: bool = False
    exclude: list[str] = field(default_factory=list)
    resubmit: bool = False  # a new job id (an env change resubmits the batch script)
    human_restart: bool = False
    approvals: int = 0
    denied: int = 0
    decisions: int = 0


@dataclass
class World:
    """The simulation state an operator reads and changes."""

    params: SimParams
    pool: Pool
    rng: random.Random
    # (node, at_minutes, repaired) -> None: the node returns to the pool then, fixed if repaired
    schedule_back: Callable[[str, float, bool], None]


def repair_minutes(params: SimParams, category: Category) -> float:
    nt = params.node_times
    return nt.rma_days * 24 * 60 if category.repair is Repair.RMA else nt.onsite_repair_hours * 60


def fix_minutes(params: SimParams, need: Need, category: Category) -> float:
    """What a person does to a node they look at, knowing what is wrong: reset, reboot or repair."""
    steps = params.node_times.step_minutes
    return {Need.NONE: 0.0, Need.RESET: steps.get("gpu_reset", 0.0), Need.REBOOT: steps.get("reboot", 0.0),
            Need.REPLACE: repair_minutes(params, category)}[need]


def hand_to_ops(world: World, node: str, t: float, categories: dict[str, Category], fallback: Category) -> None:
    """A node left out of service for people: ops look at it, fix what it needs, put it back."""
    p = world.params
    need, name = world.pool.bad.get(node, (Need.NONE, fallback.name))
    back = t + humans.draw(world.rng, p.humans, p.humans.node_triage, t) + fix_minutes(p, need, categories.get(name, fallback))
    world.schedule_back(node, back, True)


def human_drain(world: World, node: str, t: float, categories: dict[str, Category], fallback: Category) -> None:
    if node in world.pool.out:
        return
    world.pool.take_out(node, t, "drained by a person", Owner.FOREIGN, "admin: suspected bad node")
    hand_to_ops(world, node, t, categories, fallback)


class HumanOperator:
    """No automation: a person notices the dead job, hunts through the logs, restarts it."""

    def __init__(self, world: World, categories: dict[str, Category]) -> None:
        self.world = world
        self.categories = categories

    def handle(self, t: float, category: Category, node: str, job_id: str, excluded: list[str],
               started: float) -> Handling:
        w, h = self.world, self.world.params.humans
        delay = humans.draw(w.rng, h, h.notice_unaided, t) + h.diagnose_unaided_minutes + h.restart_minutes
        restart = t + delay
        exclude: list[str] = []
        if w.pool.need(node) is not Need.NONE and node not in w.pool.out and w.rng.random() < h.finds_bad_node:
            human_drain(w, node, restart, self.categories, category)
            exclude.append(node)
        return Handling(restart_at=restart, human_minutes=delay, exclude=exclude, human_restart=True)


class PitstopOperator:
    """Pitstop in observe or act mode: classify (cached), decide, carry out, escalate."""

    def __init__(self, world: World, categories: dict[str, Category], verdicts: dict[str, Verdict],
                 policy: Policy, mode: Mode) -> None:
        self.world = world
        self.categories = categories
        self.verdicts = verdicts
        self.policy = policy
        self.mode = ModeState(mode=mode)
        self.memory = Memory(len(world.pool.names))

    # --- one interruption ---------------------------------------------------------------------
    def handle(self, t: float, category: Category, node: str, job_id: str, excluded: list[str],
               started: float) -> Handling:
        w, p = self.world, self.world.params
        verdict = self.verdicts[category.name]
        faulty = [node] if category.blame is Blame.HARDWARE else []
        suspects = [node] if category.blame is Blame.SUSPECT else []
        now = at(t)
        named = faulty + suspects
        history = self.memory.history(now, job_id, verdict.signature, named, w.pool.healthy)
        incident = self.memory.record_incident(now, verdict.cause, verdict.signature, job_id, named)
        job = JobRecord(job_id=job_id, user="trainer", partition="gpu", state=category.evidence.job_state,
                        nodes=[node], time_limit_min=int(p.run.job_time_limit_hours * 60), excluded_nodes=excluded,
                        start_time=at(started), end_time=now)
        decision = decide(verdict, policy=self.policy, history=history, mode=self.mode, now=now,
                          incident_id=incident, job=job, nodes={n: w.pool.info(n) for n in named},
                          faulty_nodes=faulty, suspect_nodes=suspects)
        for trip in decision.breaker_trips:
            self.memory.open_breaker(trip.scope, trip.reason)
        handling = Handling(restart_at=t, human_minutes=0.0, decisions=1)
        observe = self.mode.mode is Mode.OBSERVE
        ready: float | None = None
        if observe:
            # The notification goes out now; a person reads it and carries out the plan as sent.
            wait = humans.draw(w.rng, p.humans, p.humans.notice_paged, t) + p.humans.restart_minutes
            _as_executed(decision)
            handling.human_minutes = wait
            ready = t + wait
        requeued = self._carry_out(decision, ready if ready is not None else t, job, category, handling, observe)
        if requeued is None:
            self._human_restart(t, ready, decision, node, category, handling)
        return handling

    def _human_restart(self, t: float, ready: float | None, decision: Decision, node: str,
                       category: Category, handling: Handling) -> None:
        """The plan did not requeue (a user's bug, the retry limit): the notification brings a
        person (in observe mode the one already carrying out the plan)."""
        w, h = self.world, self.world.params.humans
        if ready is None:
            ready = t + humans.draw(w.rng, h, h.notice_paged, t) + h.restart_minutes
        handling.restart_at = max(handling.restart_at, ready)
        handling.human_minutes = handling.restart_at - t
        handling.human_restart = True
        named = list(dict.fromkeys(decision.faulty_nodes + decision.suspect_nodes))
        if not named and w.pool.need(node) is not Need.NONE and w.rng.random() < h.finds_bad_node:
            named = [node]  # nothing named it: the person found it in the logs
        for n in named:
            human_drain(w, n, handling.restart_at, self.categories, category)
        handling.exclude = list(dict.fromkeys(handling.exclude + named))

    # --- the plan on a clock ------------------------------------------------------------------
    def _carry_out(self, decision: Decision, clock: float, job: JobRecord, category: Category,
                   handling: Handling, observe: bool) -> float | None:
        """Run the plan and its escalations; returns when the job was requeued (None: it was not)."""
        w, p = self.world, self.world.params
        outcomes: dict[int, StepOutcome] = {}
        denied_drains: set[str] = set()
        last_diag: dict[str, bool] = {}
        requeued: float | None = None
        pending = list(decision.actions)
        for _ in range(MAX_ROUNDS):
            for a in pending:
                clock, state, passed = self._step(a, clock, category, denied_drains, last_diag, handling, observe)
                outcomes[a.seq] = StepOutcome(state=state, passed=passed)
                if a.kind is ActionKind.REQUEUE and state == "done" and requeued is None:
                    requeued = clock + p.run.pitstop_requeue_minutes
                    handling.requeued = True
                    changes = a.job_changes
                    handling.exclude = list(changes.exclude_nodes) if changes else []
                    handling.resubmit = bool(changes and changes.env)
                    if requeued > handling.restart_at:
                        handling.restart_at = requeued
            pending = next_rung_steps(decision, self.policy, outcomes)
            if not pending:
                break
            nodes = sorted({s.target for s in pending})
            history = self.memory.history(at(clock), job.job_id, decision.signature, nodes, w.pool.healthy)
            extend_decision(decision, pending, policy=self.policy, history=history,
                            mode=_ACT if observe else self.mode, now=at(clock), job=job,
                            nodes={n: w.pool.info(n) for n in nodes})
            for trip in decision.breaker_trips:
                self.memory.open_breaker(trip.scope, trip.reason)
        self._settle_nodes(decision, outcomes, clock, category)
        return requeued

    def _step(self, a: PlannedAction, clock: float, category: Category, denied_drains: set[str],
              last_diag: dict[str, bool], handling: Handling, observe: bool) -> tuple[float, str, bool | None]:
        w, p = self.world, self.world.params
        if a.kind in NOTIFYING:
            return clock, "done", None
        if a.disposition in {"blocked", "would_do"}:
            return clock, "skipped" if a.disposition == "blocked" else "would_do", None
        if a.target in denied_drains and a.kind in NODE_TARGETED:
            return clock, "skipped", None
        if a.disposition == "ask" and not observe:
            handling.approvals += 1
            wait = humans.draw(w.rng, p.humans, p.humans.notice_paged, clock)
            timeout = p.node_times.approval_timeout_minutes
            answered = min(wait, timeout)
            if not handling.requeued:
                handling.human_minutes += answered  # the job waits behind this step
            if self.memory.breakers:  # the person who answers also closes the breaker
                self.memory.reset_breakers(at(clock + answered))
            if wait > timeout:  # no answer in time is a deny (pipeline.approval_timeout_s)
                handling.denied += 1
                if a.kind is ActionKind.DRAIN:
                    denied_drains.add(a.target)
                return clock + timeout, "denied", None
            clock += wait
        return self._execute(a, clock, category, last_diag)

    def _execute(self, a: PlannedAction, clock: float, category: Category,
                 last_diag: dict[str, bool]) -> tuple[float, str, bool | None]:
        w, p = self.world, self.world.params
        pool, node, kind = w.pool, a.target, a.kind
        minutes = p.node_times.step_minutes.get(kind.value, 0.0)
        if kind is ActionKind.DRAIN:
            if node not in pool.out:
                pool.take_out(node, clock, "drained by Pitstop", Owner.PITSTOP, a.reason or "pitstop:")
                self.memory.record_drain(node, at(clock))
            return clock + minutes, "done", None
        if kind is ActionKind.REQUEUE or kind is ActionKind.NONE:
            return clock, "done", None
        if kind is ActionKind.GPU_RESET:
            if STRENGTH[pool.need(node)] > _FIX_STRENGTH[kind]:
                return clock + minutes, "failed", None  # "GPU is lost": a reset cannot bring it back
            pool.fix(node, _FIX_STRENGTH[kind])
            return clock + minutes, "done", None
        if kind is ActionKind.REBOOT:
            pool.fix(node, _FIX_STRENGTH[kind])
            return clock + minutes, "done", None
        if kind is ActionKind.DIAG:
            level = a.diag_level or 1
            need = pool.need(node)
            # The diag step is DCGM at the level plus the node check (tasks/act.py _diag): only
            # DCGM's shallow levels can miss a part, and not one the node check fails anyway.
            source = self.categories.get(pool.bad.get(node, (None, category.name))[1], category)
            missed = (need is Need.REPLACE and level < 3 and not source.node_check_sees_replace
                      and w.rng.random() < p.node_times.diag_miss_below_level3)
            passed = need is Need.NONE or missed
            last_diag[node] = passed
            return clock + p.node_times.diag_minutes.get(level, 0.0), "done", passed
        if kind is ActionKind.RESUME:
            if a.after_diag_passes and not last_diag.get(node, False):
                return clock, "skipped", None  # kept drained: diagnostics failed or never ran
            if node in pool.out and pool.out[node][2] is Owner.PITSTOP:
                w.schedule_back(node, clock + minutes, False)
            return clock + minutes, "done", None
        if kind is ActionKind.RMA_TICKET:
            self.memory.record_ticket(node, at(clock))
            if node not in pool.out:
                pool.take_out(node, clock, "RMA", Owner.PITSTOP, a.reason or "pitstop: rma")
            source = self.categories.get(pool.bad.get(node, (None, category.name))[1], category)
            w.schedule_back(node, clock + repair_minutes(p, source), True)
            return clock + minutes, "done", None
        return clock + minutes, "done", None

    def _settle_nodes(self, decision: Decision, outcomes: dict[int, StepOutcome], clock: float,
                      category: Category) -> None:
        """A node the incident leaves drained with no ticket and no next step goes to ops."""
        pool = self.world.pool
        for end in node_end_states(decision, self.policy, outcomes):
            entry = pool.out.get(end.node)
            if end.state is EndState.HANDED_OVER and entry is not None and entry[2] is Owner.PITSTOP:
                hand_to_ops(self.world, end.node, clock, self.categories, category)


def _as_executed(decision: Decision) -> None:
    """Observe mode, carried out by a person: the steps the mode alone held back are done."""
    for a in decision.actions:
        if a.disposition == "would_do" and a.would_do_why.startswith("observe mode"):
            a.execute, a.would_do_why = True, ""
