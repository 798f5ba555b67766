"""Root causes beat their symptoms; scheduler facts combine with log evidence by priority."""

from __future__ import annotations

from pitstop.models import Cause, SchedulerFacts

from classifiers import classify_text

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
WATCHDOG = ("[E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600341 milliseconds before timing out.")
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    step()\n'


def test_xid79_beats_the_nccl_timeout_it_caused_even_from_the_kernel_log() -> None:
    in_log = classify_text(WATCHDOG + "\n" + XID79)
    assert (in_log.cause, in_log.signature) == (Cause.GPU_HARDWARE, "xid-79")
    split = classify_text(WATCHDOG, kernel_text="boot ok\n" + XID79)
    assert split.cause is Cause.GPU_HARDWARE
    assert split.evidence[0].source == "kernel" and split.evidence[0].line == 2


def test_traceback_that_echoes_an_oom_is_cuda_oom() -> None:
    text = TRACEBACK + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.3 GiB total)"
    verdict = classify_text(text)
    assert verdict.cause is Cause.CUDA_OOM
    assert verdict.evidence[0].line == 4


def test_time_limit_kill_after_nan_is_numerical() -> None:
    log = "step 10 loss 2.1\nstep 11 loss nan\nslurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***"
    assert classify_text(log).cause is Cause.NUMERICAL
    facts = classify_text("step 11 loss nan", SchedulerFacts(state="TIMEOUT"))
    assert facts.cause is Cause.NUMERICAL


def test_generic_traceback_after_nccl_error_is_the_nccl_cause() -> None:
    text = WATCHDOG + "\n" + TRACEBACK + "RuntimeError: something went wrong"
    assert classify_text(text).cause is Cause.NCCL_TIMEOUT


def test_scheduler_state_alone_and_as_evidence() -> None:
    for state, cause in [("TIMEOUT", Cause.TIME_LIMIT), ("NODE_FAIL", Cause.NODE_FAILURE),
                         ("OUT_OF_MEMORY", Cause.HOST_OOM), ("PREEMPTED", Cause.PREEMPTED),
                         ("CANCELLED by 1000", Cause.PREEMPTED)]:
        verdict = classify_text("", SchedulerFacts(state=state))
        assert verdict.cause is cause, state
        assert (verdict.evidence[0].source, verdict.evidence[0].line) == ("scheduler", 0)


def test_exit_codes_and_signals() -> None:
    assert classify_text("step 1\n", SchedulerFacts(exit_code=139)).cause is Cause.CRASH_SIGNAL
    assert classify_text("step 1\n", SchedulerFacts(exit_code=1, signal=11)).signature == "signal-11-sigsegv"
    assert classify_text("all good\n", SchedulerFacts(exit_code=0)).cause is Cause.SUCCESS
    assert classify_text("epoch 3 loss is nan\n", SchedulerFacts(exit_code=0)).cause is Cause.NUMERICAL
    unknown = classify_text("something odd\n", SchedulerFacts(exit_code=3))
    assert (unknown.cause, unknown.signature) == (Cause.UNKNOWN, "exit-3")


def test_success_text_never_wins_against_a_failed_scheduler_state() -> None:
    assert classify_text("Training completed\n").cause is Cause.SUCCESS
    assert classify_text("Training completed\n", SchedulerFacts(exit_code=2)).cause is Cause.UNKNOWN


def test_evidence_is_capped_truncated_and_first_occurrence() -> None:
    lines = ["ok"] * 3 + ["loss: nan " + "x" * 5000] + ["loss: nan"] * 50 + ["Gradient overflow. Skipping step", "found NaN in grads",
             "FloatingPointError: Loss became infinite or NaN", "nan loss detected", "Detected NaN"]
    verdict = classify_text("\n".join(lines))
    assert verdict.cause is Cause.NUMERICAL
    assert verdict.evidence[0].line == 4
    assert len(verdict.evidence) <= 5
    assert all(len(e.text) <= 500 for e in verdict.evidence)


def test_nothing_recognisable_is_unknown() -> None:
    verdict = classify_text("hello\nworld\n")
    assert (verdict.cause, verdict.signature) == (Cause.UNKNOWN, "no-match")


def test_evidence_keeps_first_and_last_occurrence_of_the_deciding_rule() -> None:
    lines = ["step 1 loss 2.0", "step 2 loss nan"] + [f"step {i} loss 1.0" for i in range(3, 40)] + ["step 40 loss nan", "done"]
    verdict = classify_text("\n".join(lines))
    assert verdict.cause is Cause.NUMERICAL
    assert [e.line for e in verdict.evidence] == [2, 40]
    assert "step 40" in verdict.evidence[-1].text
    once = classify_text("step 1\nstep 2 loss nan\nstep 3\n")
    assert [e.line for e in once.evidence] == [2]


def test_last_occurrence_is_found_across_windows(tmp_path) -> None:
    from classifiers import RULES, _engine
    from classifiers.scan import scan_stream

    body = [b"iteration %d ok\n" % i for i in range(30000)]
    body[10] = body[25000] = body[29990] = b"OSError: [Errno 28] No space left on device\n"
    path = tmp_path / "many.log"
    path.write_bytes(b"".join(body))
    for engine in ("hyperscan", "re2", "re"):
        with open(path, "rb") as stream:
            hits = scan_stream(stream, _engine(engine), RULES, "log", window_bytes=8192)
        hit = next(h for h in hits if h.signature == "no-space-left")
        assert (hit.line, hit.last_line) == (11, 29991), engine


SUBMITIT_USR2 = "submitit WARNING (2024-03-01 02:06:11,453) - Caught signal SIGUSR2 on gpu01: this job is preempted."
REQUEUE = "slurmstepd: error: *** JOB 608 ON gpu01 CANCELLED AT 2024-03-01T02:06:12 DUE TO JOB REQUEUE ***"
PREEMPTION = "slurmstepd: error: *** JOB 608 ON gpu01 CANCELLED AT 2024-03-01T02:06:12 DUE TO PREEMPTION ***"


def test_warning_signal_and_self_requeue_is_the_time_limit_whatever_the_launcher_guesses() -> None:
    # Slurm sends SIGUSR1/2 only as the job's own --signal warning; a preemption says so itself.
    verdict = classify_text(SUBMITIT_USR2 + "\n" + REQUEUE)
    assert (verdict.cause, verdict.signature) == (Cause.TIME_LIMIT, "time-limit-warning-signal")
    assert classify_text(SUBMITIT_USR2 + "\n" + PREEMPTION).cause is Cause.PREEMPTED
    assert classify_text(REQUEUE).cause is Cause.PREEMPTED  # a bare requeue: this attempt was cancelled


def test_lost_mpi_daemon_is_the_node_unless_the_log_shows_the_fabric_failing() -> None:
    # Real threads blame the node (rebooted, died) for a lost daemon more often than the link.
    orte = "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[1,0],0] on node a01"
    assert classify_text(orte).cause is Cause.NODE_FAILURE
    older = "ORTE has lost communication with its daemon located on node:\n\n   hostname:  ip-10-0-0-7"
    assert classify_text(older).signature == "mpi-lost-daemon"
    ib = "gpu7:3468:3905 [4] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<54862> with status=12"
    assert classify_text(ib + "\n" + orte).cause is Cause.NETWORK_FABRIC


def test_cuda_ecc_wording_defers_to_the_catalogued_xid_in_the_kernel_log() -> None:
    """A job on a GPU with a contained Xid 94 dies with CUDA's "uncorrectable ECC error": NVIDIA's
    bucket for the Xid (RESTART_APP) must decide, not the sticky ECC rule; without the Xid the
    CUDA line still names the fault."""
    from classifiers import classify_text

    log = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    for xid in (94, 95):
        kernel = f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, name=python, Contained: SM (0x1).\n"
        v = classify_text(log, kernel_text=kernel)
        assert v.signature == f"xid-{xid}" and any("uncorrectable ECC" in e.text for e in v.evidence)
    assert classify_text(log).signature == "ecc-uncorrectable"
    # an informational Xid (63, IGNORE) does not take over
    assert classify_text(log, kernel_text="NVRM: Xid (PCI:0000:3b:00): 63, pid=1, Row Remapper\n").signature == "ecc-uncorrectable"


def test_an_uncaught_cpp_exception_beats_the_sigabrt_it_causes() -> None:
    # std::terminate calls abort(): the exception is the cause, the SIGABRT its echo.
    text = ("terminate called after throwing an instance of 'char const*'\n"
            "Program received signal SIGABRT: Process abort signal.\n"
            "slurm_script: line 104: 811018 Aborted                 (core dumped) wave S3.mdw\n")
    verdict = classify_text(text)
    assert (verdict.cause, verdict.signature) == (Cause.SOFTWARE_BUG, "cpp-exception")
    # a bare SIGABRT with no exception stays a crash signal
    assert classify_text("Program received signal SIGABRT: Process abort signal.\n").cause is Cause.CRASH_SIGNAL


def test_a_cuda_error_wrapped_in_an_uncaught_exception_keeps_its_gpu_alternative() -> None:
    # The exception is only the CUDA error's carrier: the verdict stays the CUDA error, with the
    # Xid test that tells a faulty GPU from a bug.
    text = ("terminate called after throwing an instance of 'c10::Error'\n"
            "  what():  CUDA error: invalid configuration argument\n"
            "Aborted (core dumped)\n")
    verdict = classify_text(text)
    assert (verdict.cause, verdict.signature) == (Cause.SOFTWARE_BUG, "cuda-error")
    assert Cause.GPU_HARDWARE in {a.cause for a in verdict.alternatives}


RUN_STOP = (':::MLLOG {"namespace": "", "time_ms": 1652766836235, "event_type": "INTERVAL_END", "key": "run_stop", '
            '"value": null, "metadata": {"file": "train.py", "lineno": 975, "status": "success"}}')


def test_what_fails_after_a_benchmark_s_run_stop_success_is_shutdown_noise() -> None:
    """MLPerf's run_stop success is the run's own verdict: an NCCL watchdog at teardown, a
    finaliser's traceback or a stale NFS handle in atexit after it do not make the job a failure;
    the noise stays on the verdict as an alternative."""
    for noise, cause in ((WATCHDOG, Cause.NCCL_TIMEOUT),
                         ("Error in atexit._run_exitfuncs:\nOSError: [Errno 116] Stale file handle", Cause.STORAGE_IO),
                         (TRACEBACK + "FileNotFoundError: [Errno 2] No such file or directory", Cause.SOFTWARE_BUG)):
        assert classify_text(noise).cause is cause
        after = classify_text(RUN_STOP + "\n" + noise)
        assert (after.cause, after.signature) == (Cause.SUCCESS, "run-stop-success"), noise
        assert cause in {a.cause for a in after.alternatives}
        # before the run's end the same lines are the failure
        assert classify_text(noise + "\n" + RUN_STOP).cause is cause


def test_hardware_memory_and_a_failed_scheduler_state_after_run_stop_still_win() -> None:
    assert classify_text(RUN_STOP + "\n" + XID79).cause is Cause.GPU_HARDWARE
    oom = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.0. Some of your processes may have been killed by the cgroup out-of-memory handler."
    assert classify_text(RUN_STOP + "\n" + oom).cause is Cause.HOST_OOM
    assert classify_text(RUN_STOP + "\n" + WATCHDOG, SchedulerFacts(state="FAILED", exit_code=1)).cause is not Cause.SUCCESS


OVERFLOW = ("2022-10-18 04:37:45 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, "
            "setting loss scale to: 64.0")
DONE = "2022-10-18 04:41:48 | INFO | fairseq_cli.train | done training in 559.6 seconds"


def test_fp16_overflow_skips_the_run_outlived_are_success_but_a_collapse_or_nan_never_is() -> None:
    """Dynamic loss scaling skips a few steps in healthy runs (routine rows): a success line after
    them means the run finished. A collapsed loss scale or a NaN loss is a finding, not routine."""
    assert classify_text(OVERFLOW + "\n" + TRACEBACK + "RuntimeError: boom").cause is not Cause.SUCCESS
    assert classify_text(OVERFLOW).cause is Cause.NUMERICAL  # alone, still named
    finished = classify_text(OVERFLOW + "\n" + DONE)
    assert (finished.cause, finished.signature) == (Cause.SUCCESS, "training-complete")
    assert Cause.NUMERICAL in {a.cause for a in finished.alternatives}
    # a success line that came first is not outlived: the overflows after it still decide
    assert classify_text(DONE + "\n" + OVERFLOW).cause is Cause.NUMERICAL
    collapsed = OVERFLOW + "\nCurrent loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n" + DONE
    assert classify_text(collapsed).cause is Cause.NUMERICAL
    assert classify_text(OVERFLOW + "\nstep 900 | loss nan\n" + DONE).cause is Cause.NUMERICAL


QE_ABORT = ("     Error in routine  read_namelists (1):\n"
            "Abort(1) on node 0 (rank 0 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 0\n"
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
            "slurmstepd: error: *** STEP 1693636.0 ON comput126 CANCELLED AT 2020-12-24T12:40:17 ***\n"
            "srun: error: comput126: tasks 0-35: Killed")
BARE_CANCEL = "slurmstepd: error: *** STEP 12769.0 ON gpu-h128 CANCELLED AT 2026-07-12T07:51:35 ***"


def test_a_bare_step_cancel_after_a_task_s_own_failure_is_srun_ending_the_step() -> None:
    """srun cancels the step (no reason given) once a task failed: the failure before it decides."""
    verdict = classify_text(QE_ABORT)
    assert (verdict.cause, verdict.signature) == (Cause.SOFTWARE_BUG, "app-error-at-source")
    assert Cause.PREEMPTED in {a.cause for a in verdict.alternatives}
    # a project's own exception class (py-{1}, 31) ranks below the cancel (34) on priority alone
    py = TRACEBACK + "ShardFormatError: bad shard 17\n" + BARE_CANCEL
    assert classify_text(py).cause is Cause.SOFTWARE_BUG
    # alone, or before the failure, or after only a weak line, the cancel is still what we see
    assert classify_text(BARE_CANCEL).cause is Cause.PREEMPTED
    assert classify_text(BARE_CANCEL + "\n" + TRACEBACK + "ShardFormatError: bad shard 17").cause is Cause.PREEMPTED
    assert classify_text(OVERFLOW + "\n" + BARE_CANCEL).cause is Cause.PREEMPTED
    # a cancel that names its reason is not a consequence
    timed = "slurmstepd: error: *** STEP 7.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***"
    assert classify_text(TRACEBACK + "ValueError: bad shape\n" + timed).cause is Cause.TIME_LIMIT


def test_a_late_success_line_still_counts_after_early_routine_overflows_in_a_big_log(tmp_path) -> None:
    """The scanner's pruning must not drop the success rows once a routine hit is found."""
    from classifiers import RULES, _engine
    from classifiers.decide import candidates_from, decide
    from classifiers.scan import scan_stream

    body = [b"| INFO | fairseq.trainer | epoch 001: %d / 9000 loss=3.1\n" % i for i in range(3000)]
    body[5] = OVERFLOW.encode() + b"\n"
    body[2999] = DONE.encode() + b"\n"
    path = tmp_path / "train.log"
    path.write_bytes(b"".join(body))
    for engine in ("hyperscan", "re2", "re"):
        with open(path, "rb") as stream:
            hits = scan_stream(stream, _engine(engine), RULES, "log", window_bytes=8192)
        verdict = decide(candidates_from([hits], RULES, []))
        assert (verdict.cause, verdict.signature) == (Cause.SUCCESS, "training-complete"), engine


def test_a_routine_hit_sets_no_pruning_floor() -> None:
    from classifiers import RULES
    from classifiers.scan import _Pruning

    routine = {n for n, rule in enumerate(RULES) if rule.routine}
    assert routine and _Pruning(RULES).strongest(routine) == 0
