"""The discrete-event simulation of one synchronous training job on a Slurm cluster.

One job holds `job_nodes` nodes; any interruption stops all of it (synchronous training). It
checkpoints every `checkpoint_minutes` of training and loses what came after the last one. Faults
arrive as one Poisson process per category (Table 5's counts as rates) while the job holds its
nodes; a fault on a node that still needs fixing comes back when the job runs on that node again
(a repeat failure). Who handles an interruption (`operators`) decides when the job is requeued
and which nodes leave the pool; the job then waits for enough nodes and pays its restart.

Every minute of the run lands in exactly one bucket: productive, or one kind of loss. Random
streams are split: the fault arrivals (times, categories, which node, hidden need) come from
their own stream, so every strategy in a comparison sees the same faults.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable

from pitstop.models import Verdict
from pitstop.policy.model import Policy
from pitstop.policy.safety import Owner
from pitstop.simulate import humans
from pitstop.simulate.operators import Handling, HumanOperator, PitstopOperator, World, fix_minutes
from pitstop.simulate.params import Category, Need, SimParams
from pitstop.simulate.pool import Pool
from pitstop.simulate.results import LOSS_KINDS, PLANNED, StrategyResult
from pitstop.simulate.strategies import Strategy

# Event kinds, in the order they win a tie (a node coming back before the job asks for nodes).
BACK, LINK_END, REQUEST, TRAIN, FAULT, RECUR, PRUNE = range(7)
PROGRESS_EVERY = 256  # events between progress callbacks


def fault_arrivals(params: SimParams, seed: int) -> list[tuple[float, int, float, Need]]:
    """(minute, category index, node draw in [0,1), hidden need) for the whole run, from the
    fault stream alone: identical for every strategy with the same seed."""
    rng = random.Random(f"faults-{seed}")
    rates = [params.rate_per_minute(c) for c in params.categories]
    total = sum(rates)
    out, t = [], 0.0
    while True:
        t += rng.expovariate(total)
        if t >= params.horizon_minutes:
            return out
        i = rng.choices(range(len(rates)), weights=rates)[0]
        needs = params.categories[i].need
        need = rng.choices(list(needs), weights=list(needs.values()))[0]
        out.append((t, i, rng.random(), need))


class Simulation:
    def __init__(self, params: SimParams, strategy: Strategy, policy: Policy, verdicts: dict[str, Verdict],
                 seed: int, arrivals: list[tuple[float, int, float, Need]] | None = None,
                 on_progress: Callable[[float], None] | None = None) -> None:
        self.p = params
        self.strategy = strategy
        self.rng = random.Random(f"ops-{seed}")
        self.pool = Pool(params.pool_nodes, params.cluster.job_nodes, self.rng)
        self.categories = {c.name: c for c in params.categories}
        self.world = World(params=params, pool=self.pool, rng=self.rng, schedule_back=self._schedule_back)
        if strategy.mode is None:
            self.operator = HumanOperator(self.world, self.categories)
        else:
            self.operator = PitstopOperator(self.world, self.categories, verdicts, strategy.policy(policy), strategy.mode)
        self.arrivals = arrivals if arrivals is not None else fault_arrivals(params, seed)
        self.on_progress = on_progress
        self.heap: list[tuple[float, int, int, tuple]] = []
        self.seq = 0
        self.events = 0
        # the job
        self.phase = "down"  # down | waiting | starting | running
        self.phase_since = 0.0
        self.run_id = 0
        self.request_token = 0
        self.train_start = 0.0
        self.run_started = 0.0  # when the current run was started (Slurm's StartTime)
        self.job_serial = 1
        self.link_due = False
        self.excluded: list[str] = []
        self.cause = PLANNED
        self.pending: Handling | None = None
        self.down_since = 0.0
        # the books
        self.productive = 0.0
        self.loss: Counter = Counter()
        self.loss_by_cause: Counter = Counter()
        self.human_wait_by_cause: Counter = Counter()
        self.interruptions: Counter = Counter()
        self.repeats: Counter = Counter()
        self.human_restarts = 0
        self.approvals = 0
        self.denied = 0
        self.needed_human = 0
        self.needed_human_by_category: Counter = Counter()
        self.planned_restarts = 0
        self.decisions = 0

    # --- plumbing -----------------------------------------------------------------------------
    def _push(self, t: float, kind: int, *data) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, data))

    def _schedule_back(self, node: str, t: float, repaired: bool) -> None:
        self._push(t, BACK, node, self.pool.token.get(node, 0), repaired)

    @property
    def job_id(self) -> str:
        return str(100000 + self.job_serial)

    def _lose(self, kind: str, minutes: float, cause: str | None = None) -> None:
        if minutes > 0:
            self.loss[kind] += minutes
            self.loss_by_cause[cause or self.cause] += minutes
            if kind == "waiting_for_human":
                self.human_wait_by_cause[cause or self.cause] += minutes

    # --- the run ------------------------------------------------------------------------------
    def run(self) -> StrategyResult:
        horizon = self.p.horizon_minutes
        for i, arrival in enumerate(self.arrivals):
            self._push(arrival[0], FAULT, i)
        self._push(self.p.run.job_time_limit_hours * 60, LINK_END)
        self._request(0.0)
        handlers = {BACK: self._back, LINK_END: self._link_end, REQUEST: self._on_request, TRAIN: self._train,
                    FAULT: self._fault, RECUR: self._recur, PRUNE: self._prune}
        while self.heap and self.heap[0][0] < horizon:
            t, kind, _, data = heapq.heappop(self.heap)
            self.events += 1
            handlers[kind](t, *data)
            if self.on_progress is not None and self.events % PROGRESS_EVERY == 0:
                self.on_progress(t / horizon)
        self._close(horizon)
        if self.on_progress is not None:
            self.on_progress(1.0)
        return self._result(horizon)

    def _close(self, t: float) -> None:
        """Book the phase in progress at time t (the end of the run)."""
        if self.phase == "running":
            self.productive += t - self.train_start  # the run ends with a final checkpoint
        elif self.phase == "starting":
            self._lose("restart", t - self.phase_since)
        elif self.phase == "waiting":
            self._lose("waiting_for_nodes", t - self.phase_since)
        elif self.pending is not None:
            self._book_down(min(t, self.pending.restart_at))

    def _book_down(self, until: float) -> None:
        """The time from the interruption to the requeue: a person's share, then automation's."""
        h = self.pending
        span = until - self.down_since
        human = min(h.human_minutes, span)
        self._lose("waiting_for_human", human)
        self._lose("pitstop_reaction", span - human)

    def _stop(self, t: float) -> None:
        """The job stops now (an interruption): book what it was doing."""
        if self.phase == "running":
            elapsed = t - self.train_start
            lost = elapsed % self.p.run.checkpoint_minutes
            self.productive += elapsed - lost
            self._lose("lost_work", lost)
        elif self.phase == "starting":
            self._lose("restart", t - self.phase_since)
        self.run_id += 1
        self.phase = "down"

    # --- events -------------------------------------------------------------------------------
    def _fault(self, t: float, i: int) -> None:
        if self.phase not in ("starting", "running"):
            return  # the job holds no nodes: nothing to interrupt
        _, ci, u, need = self.arrivals[i]
        category = self.p.categories[ci]
        node = self.pool.allocation[int(u * len(self.pool.allocation))]
        self.pool.break_node(node, need, category.name)
        self._interrupt(t, category, node, repeat=False)

    def _recur(self, t: float, node: str, run_id: int) -> None:
        if run_id != self.run_id or node not in self.pool.bad or node in self.pool.out or node not in self.pool.in_job:
            return
        self._interrupt(t, self.categories[self.pool.bad[node][1]], node, repeat=True)

    def _interrupt(self, t: float, category: Category, node: str, repeat: bool) -> None:
        self._stop(t)
        self.cause = category.name
        self.interruptions[category.name] += 1
        if repeat:
            self.repeats[category.name] += 1
        if category.node_down:
            # slurmctld marks the node DOWN with its own reason; ops bring it back.
            self.pool.take_out(node, t, "down", Owner.FOREIGN)
            triage = humans.draw(self.rng, self.p.humans, self.p.humans.node_triage, t)
            self._schedule_back(node, t + triage + fix_minutes(self.p, self.pool.need(node), category), True)
        h = self.operator.handle(t, category, node, self.job_id, list(self.excluded), self.run_started)
        self.decisions += h.decisions
        self.human_restarts += h.human_restart
        self.approvals += h.approvals
        self.denied += h.denied
        # A person was needed when the job's return waited for one: a restart by hand, or an
        # approval asked before the requeue. An approval for node work after the requeue (the
        # RMA ticket of an excluded node) keeps the node out, not the job: counted in `approvals`.
        if h.human_restart or h.human_minutes > 0:
            self.needed_human += 1
            self.needed_human_by_category[category.name] += 1
        if h.resubmit:
            self.job_serial += 1  # a resubmitted batch script is a new job, with the changes
        self.excluded = list(dict.fromkeys(self.excluded + h.exclude)) if not h.resubmit else list(h.exclude)
        self.pending, self.down_since = h, t
        self._request(h.restart_at)

    def _request(self, t: float) -> None:
        self.request_token += 1
        self._push(t, REQUEST, self.request_token)

    def _on_request(self, t: float, token: int) -> None:
        if token != self.request_token or self.phase in ("starting", "running"):
            return
        keep = self.pending.exclude if self.pending is not None else []
        if self.pending is not None:
            self._book_down(t)
            self.pending = None
        if self.link_due:
            self._new_link(keep)  # the new job is submitted with this failure's exclusions
        self.phase, self.phase_since = "waiting", t
        self._try_start(t)
        if self.phase == "waiting":
            # A pending job is nobody's alarm: a person notices it eventually and prunes the
            # exclusions that keep it from starting.
            self._push(t + humans.draw(self.rng, self.p.humans, self.p.humans.notice_unaided, t), PRUNE, self.run_id)

    def _try_start(self, t: float) -> None:
        if not self.pool.allocate(set(self.excluded)):
            return
        self._lose("waiting_for_nodes", t - self.phase_since)
        self.phase, self.phase_since = "starting", t
        self.run_started = t
        self._push(t + self.p.run.restart_minutes, TRAIN, self.run_id)
        for node in self.pool.bad_in_job():
            self._push(t + self.rng.expovariate(1.0 / self.p.run.recurrence_minutes), RECUR, node, self.run_id)

    def _train(self, t: float, run_id: int) -> None:
        if run_id != self.run_id or self.phase != "starting":
            return
        self._lose("restart", t - self.phase_since)
        self.phase, self.train_start = "running", t

    def _back(self, t: float, node: str, token: int, repaired: bool) -> None:
        if self.pool.token.get(node) != token:
            return  # taken out again since: this return is stale
        if repaired:
            self.pool.fix(node, 3)
        self.pool.bring_back(node, t)
        if self.phase == "waiting":
            self._try_start(t)

    def _prune(self, t: float, run_id: int) -> None:
        if self.phase != "waiting" or run_id != self.run_id:
            return
        self.excluded = [n for n in self.excluded if n in self.pool.out]
        self.needed_human += 1
        self.needed_human_by_category[self.cause] += 1
        self._try_start(t)

    def _new_link(self, exclude: list[str] | None = None) -> None:
        self.job_serial += 1
        self.excluded = list(exclude or [])
        self.link_due = False

    def _link_end(self, t: float) -> None:
        """The chain's next job takes over: a new id, a fresh exclude list, a planned restart."""
        self._push(t + self.p.run.job_time_limit_hours * 60, LINK_END)
        if self.phase != "running":
            self.link_due = True  # the next requeue starts the new link
            return
        self.productive += t - self.train_start  # the link checkpoints on its way out
        self.planned_restarts += 1
        self.run_id += 1
        self.phase = "down"
        self.cause = PLANNED
        self._new_link()
        self.phase, self.phase_since = "waiting", t
        self._try_start(t)

    # --- the report ---------------------------------------------------------------------------
    def _result(self, horizon: float) -> StrategyResult:
        gpus = self.p.cluster.job_nodes * self.p.cluster.gpus_per_node
        to_gpu_h = gpus / 60.0
        series = self.pool.hourly_out(horizon)
        return StrategyResult(
            name=self.strategy.name,
            label=self.strategy.label,
            ettr=self.productive / horizon,
            productive_gpu_hours=self.productive * to_gpu_h,
            allocated_gpu_hours=horizon * to_gpu_h,
            interruptions=sum(self.interruptions.values()),
            interruptions_by_category=dict(self.interruptions),
            fresh_interruptions=sum(self.interruptions.values()) - sum(self.repeats.values()),
            planned_restarts=self.planned_restarts,
            repeat_failures=sum(self.repeats.values()),
            repeats_by_category=dict(self.repeats),
            human_restarts=self.human_restarts,
            approvals=self.approvals,
            approvals_denied=self.denied,
            needed_human=self.needed_human,
            needed_human_by_category=dict(self.needed_human_by_category),
            lost_gpu_hours={k: self.loss.get(k, 0.0) * to_gpu_h for k in LOSS_KINDS},
            lost_gpu_hours_by_cause={k: v * to_gpu_h for k, v in sorted(self.loss_by_cause.items(), key=lambda kv: -kv[1])},
            waiting_for_human_by_cause={k: v * to_gpu_h for k, v in
                                        sorted(self.human_wait_by_cause.items(), key=lambda kv: -kv[1])},
            nodes_out_mean=sum(series) / len(series) if series else 0.0,
            nodes_out_max=max(series, default=0),
            nodes_out_hourly=series,
            decisions=self.decisions,
            events=self.events + self.decisions,
        )
