"""Scores on the development set of real failure excerpts (copied into tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from classifiers import classify_text
from classifiers.evaluate import evaluate_corpus, load_corpus, score
from pitstop.models import Cause

DEV = Path(__file__).resolve().parents[1] / "fixtures" / "classifiers" / "dev.jsonl"


def test_dev_set_macro_f1_and_accuracy_floor() -> None:
    report = evaluate_corpus(DEV)
    assert report.total == 134
    # Floors just under today's figures (macro-F1 0.963, accuracy 0.963): a regression fails here.
    assert report.macro_f1 >= 0.96, report.mistakes
    assert report.accuracy >= 0.96, report.mistakes
    # Every mistake left is on a row the corpus marks as disputed.
    assert report.unambiguous is not None and report.unambiguous.accuracy == 1.0, report.mistakes


GPUALERT = DEV.with_name("gpualert.jsonl")


def test_gpualert_corpus_is_an_independent_check() -> None:
    """GPUAlert's published corpus (MIT), mapped by bench/gpualert_corpus.py; 480 logs."""
    report = evaluate_corpus(GPUALERT)
    assert report.total == 480
    assert report.accuracy >= 0.99, report.mistakes
    assert report.macro_f1 >= 0.99, report.mistakes


def test_accept_field_counts_an_alternative_cause_as_right(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "ncclSystemError: unhandled system error", "label": "nccl_timeout", "accept": ["network_fabric"]}\n'
                      '{"text": "ncclSystemError: unhandled system error", "label": "nccl_timeout"}\n')
    report = evaluate_corpus(corpus)
    assert report.total == 2 and report.accuracy == 0.5


@pytest.mark.parametrize("engine", ["re2", "re"])
def test_fallback_engines_give_identical_verdicts_on_the_dev_set(engine: str) -> None:
    for example in load_corpus(DEV):
        fast = classify_text(example.text or "")
        other = classify_text(example.text or "", engine=engine)
        assert fast == other, example.id


def test_score_is_computed_from_pairs() -> None:
    pairs = [(Cause.CUDA_OOM, Cause.CUDA_OOM), (Cause.CUDA_OOM, Cause.SOFTWARE_BUG), (Cause.SOFTWARE_BUG, Cause.SOFTWARE_BUG)]
    report = score(pairs)
    by = {s.cause: s for s in report.per_cause}
    assert by[Cause.CUDA_OOM].precision == 1.0 and by[Cause.CUDA_OOM].recall == 0.5
    assert by[Cause.SOFTWARE_BUG].precision == 0.5 and by[Cause.SOFTWARE_BUG].recall == 1.0
    assert report.accuracy == pytest.approx(2 / 3)
    assert report.confusion["cuda_oom"] == {"cuda_oom": 1, "software_bug": 1}


def test_ambiguous_rows_are_scored_and_also_reported_apart() -> None:
    pairs = [(Cause.PREEMPTED, Cause.UNKNOWN), (Cause.PREEMPTED, Cause.PREEMPTED), (Cause.CUDA_OOM, Cause.CUDA_OOM)]
    report = score(pairs, ["a", "b", "c"], [True, False, False])
    assert report.accuracy == pytest.approx(2 / 3)
    assert report.mistakes == [{"id": "a", "label": "preempted", "predicted": "unknown", "ambiguous": True}]
    assert report.unambiguous is not None
    assert report.unambiguous.total == 2 and report.unambiguous.accuracy == 1.0
    assert score(pairs, ["a", "b", "c"], [False] * 3).unambiguous is None


def test_corpus_rows_by_path_resolve_relative_to_the_corpus(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("ModuleNotFoundError: No module named 'apex'\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"path": "logs/a.log", "label": "environment"}\n\n{"text": "loss: nan", "label": "numerical"}\n')
    report = evaluate_corpus(corpus)
    assert report.total == 2 and report.accuracy == 1.0


HARVEST = DEV.with_name("harvest.jsonl")


def _rounds(tmp_path, keep) -> Path:
    rows = [line for line in HARVEST.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = tmp_path / "rounds.jsonl"
    out.write_text("\n".join(r for r in rows if keep(json.loads(r)["id"].split("-")[0])) + "\n", encoding="utf-8")
    return out


def test_second_corpus_of_real_excerpts_from_other_threads(tmp_path) -> None:
    """1,725 excerpts from threads and documents outside the dev set (see harvest-README.md), rounds A-AU."""
    assert evaluate_corpus(HARVEST).total == 1725
    # Rounds A-H (308 rows): floors just under today's figures (accuracy 0.860; 0.984 unambiguous).
    report = evaluate_corpus(_rounds(tmp_path, lambda r: r not in {row[0] for row in ROUND_FLOORS}))
    assert report.total == 308
    assert report.accuracy >= 0.85, report.mistakes
    assert report.unambiguous is not None and report.unambiguous.accuracy >= 0.98, report.mistakes


# Each harvest round after its first score: (id prefix, rows, accuracy floor, unambiguous floor).
# The history of each round (its first score, scored before any rule changed for it, and what
# raised it) is in the comment above its row and in harvest-README.md.
ROUND_FLOORS: list[tuple[str, int, float, float]] = [
    # Round I (27 rows): first score 0.444 (0.500 unambiguous); floors under today's 0.889 (0.950).
    ("I", 27, 0.85, 0.90),
    # Round J (58 rows): first score 0.655 (0.694 unambiguous, macro-F1 0.728), scored on the last
    # commit before any rule changed for it; floors under today's 0.914 (0.980).
    ("J", 58, 0.89, 0.96),
    # Round K (63 rows, 25 ambiguous; 2026-12-04): scored before any rule was changed for it,
    # first score 0.540 (0.684 unambiguous), macro-F1 0.601; 0.587 (0.763) after three family rows
    # (container runtime, CUDA library not found, MPI_Init); 0.746 (0.947), macro-F1 0.765 after the
    # next families (prolog failures, other schedulers' memory-limit kills and down nodes, HTCondor
    # evictions, NCCL socket-interface and shm set-up, ESHUTDOWN, numbered step lines that end in
    # NaN); 0.794 (1.000), macro-F1 0.810 with CUDA's driver-API OOM name and nccl-tests' result
    # table / a server answering 200 as success; 0.810 with fp16 overflow at a working scale as
    # routine (after round L's first score). Floors at today's figures.
    ("K", 63, 0.810 - 1e-3, 1.0 - 1e-3),
    # Round L (59 rows, 26 ambiguous; 2026-12-04): scored on commit 6e804ef before any rule was
    # changed for it: 0.576 (0.758 unambiguous), macro-F1 0.642 (the session's start, 9efe47a, before
    # round K's later families: 0.576, 0.758, macro-F1 0.653). After its families (fp16 overflow at
    # a working scale is routine, CUDA toolkit vs torch's CUDA, a socket family the container lacks,
    # an all-NaN tensor, PyTorch's at-exit process-group warning as weak success): 0.678 (0.909),
    # macro-F1 0.722; 0.695 with round O's weak-success rows (transformers' load report). Floors at
    # today's figures.
    ("L", 59, 0.695 - 1e-3, 0.909 - 1e-3),
    # Round M (21 rows, 8 ambiguous; 2026-12-04): scored on commit dbc5aa0 before any rule was
    # changed for it: 0.429 (0.538 unambiguous), macro-F1 0.475; 8 of its 12 misses were `unknown`.
    # After its families (HTCondor's memory holds, the OFI plugin finding no libfabric provider, a
    # node that cannot resolve the job's user, a program's own error at a source location or abort
    # routine, Slurm's COMPLETED 0:0 as success): 0.714 (0.923), macro-F1 0.709. Floors at today's
    # figures.
    ("M", 21, 0.714 - 1e-3, 0.923 - 1e-3),
    # Round N (61 rows, 28 ambiguous; 2026-12-04): scored on commit 9be87d2 (round M's families and
    # the fallback retrained on A-M in) before any rule was changed for it: 0.443 (0.697 unambiguous),
    # macro-F1 0.555, the same with --no-learned (the same on the session's start, 2bd0d6d). After its
    # families (AzureML's pre-empted nodes, a logger ignoring NaN values, CUDA driver compatibility
    # errors by name and number, cuMemAlloc out of memory, SIGILL as a binary built for another CPU,
    # molecular-dynamics blow-ups, NVLS / Fabric Manager failures, the scheduler refusing a request,
    # UCX's shared-memory transport, Open MPI's openib warnings, NCCL's newer remote-error and
    # at-exit wordings): 0.705 (0.970), macro-F1 0.768. Floors at today's figures.
    ("N", 61, 0.705 - 1e-3, 0.970 - 1e-3),
    # Round O (53 rows, 20 ambiguous; 2026-12-04): scored on commit 1011e17 (round N's families in)
    # before any rule was changed for it: 0.585 (0.697 unambiguous), macro-F1 0.635. After its
    # families (transformers' model-loading report and PyTorch's destroy_process_group warning as
    # weak success, the kernel's OOM report, PyTorch's shm advice and DataLoader bus error, a
    # launcher's "manually preempted", AWS Batch's Host EC2 terminated, the OpenACC runtime's device
    # OOM, NAMD / Tinker blow-ups, CFD solver divergence, an IB adapter missing from sysfs, ROCm's
    # GPU hang, Ray's dead node): 0.830 (1.000), macro-F1 0.846. Floors at today's figures.
    ("O", 53, 0.830 - 1e-3, 1.0 - 1e-3),
    # Round P (55 rows, 29 ambiguous; 2026-12-05): scored on a frozen copy of commit 076daba (round
    # O's families and the fallback retrained on A-O in) before any rule was changed for it: 0.527
    # (0.731 unambiguous), macro-F1 0.572, the same with --no-learned. After its families (Slurm's
    # truncated "Node unexpectedly re(booted)", launchers' start-up notices as weak success, CFD
    # continuity errors, the NVRM API mismatch, bare Xid events, CUDA's contained error, EFA's
    # unresponsive receiver, "Spot Instance terminated", the loss baseline after warm-up): 0.673
    # (0.923), macro-F1 0.725; 0.691 (0.962) with round Q's NCCL shm row (a full /dev/shm is
    # host_oom). Floors at today's figures.
    ("P", 55, 0.691 - 1e-3, 0.962 - 1e-3),
    # Round Q (52 rows, 28 ambiguous; 2026-12-05): scored on a frozen copy of commit 683c56e (round
    # P's families in) before any rule was changed for it: 0.346 (0.583 unambiguous), macro-F1
    # 0.407, the same with --no-learned (the session's start, cdedb4c: 0.346 / 0.583, macro-F1
    # 0.369); 22 of its 34 misses are `unknown`. After its families (simulation state gone NaN,
    # numpy's floating-point warnings as weak numerical, NCCL's shm segment: permission denied is
    # environment and a full /dev/shm host_oom, package managers finding no package, CUDA error 802,
    # TensorFlow's ResourceExhausted for a disk quota, WRF's completion lines, fsspec timeouts,
    # MPI launchers' signal-6 deaths): 0.558 (0.917), macro-F1 0.540; 0.577 (0.958) with round U's
    # PMIx error prints as weak success. Floors at today's figures.
    ("Q", 52, 0.577 - 1e-3, 0.958 - 1e-3),
    # Round R (27 rows, 20 ambiguous; 2026-12-06): scored on a frozen copy of commit 7b6be31 (round
    # Q's families in) before any rule was changed for it: 0.593 (0.714 unambiguous), macro-F1
    # 0.576, the same with --no-learned. After its families (a CUDA kernel's own assert line, CUDA's
    # "operation not supported" as environment, NCCL failing to read the node's topology): 0.704
    # (1.000), macro-F1 0.652. Floors at today's figures.
    ("R", 27, 0.704 - 1e-3, 1.0 - 1e-3),
    # Round S (17 rows, 8 ambiguous; 2026-12-06): scored on a frozen copy of commit 30cb58f (round
    # R's families and the fallback retrained on A-Q in) before any rule was changed for it: 0.471
    # (0.667 unambiguous), macro-F1 0.510, the same with --no-learned. After its families (EFA's
    # FI_ENOMEM as the locked-memory limit, runc's "container init was OOM-killed", NCCL's topology
    # attributes not found, a library's own version check, pyxis unable to run enroot): 0.765
    # (1.000), macro-F1 0.707. Floors at today's figures.
    ("S", 17, 0.765 - 1e-3, 1.0 - 1e-3),
    # Round T (30 rows, 11 ambiguous; 2026-12-06; 18 from sites' and vendors' troubleshooting
    # documents): scored on a frozen copy of commit 85a5dbb (round S's families and the fallback
    # retrained on A-S in) before any rule was changed for it: 0.433 (0.579 unambiguous), macro-F1
    # 0.599, the same with --no-learned. After its families (NCCL's named network not found, HIP's
    # and Kokkos' binaries for another GPU, PrologSlurmctld failing, c10d's IPv6 fallback warning as
    # weak success): 0.600 (0.737), macro-F1 0.722. Floors at today's figures.
    ("T", 30, 0.600 - 1e-3, 0.737 - 1e-3),
    # Round U (31 rows, 4 ambiguous; 2026-12-06; HPC sites' and frameworks' troubleshooting
    # documents): scored on a frozen copy of commit 7770411 (round T's families in) before any rule
    # was changed for it: 0.516 (0.556 unambiguous), macro-F1 0.657, the same with --no-learned.
    # After its families (ssh refused by key or host key, a job step's invalid request, Kubernetes'
    # PreemptionByScheduler, quota notices, Cray MPICH's GTL not linked, PMIx's own error prints as
    # weak success): 0.710 (0.741), macro-F1 0.820. Floors at today's figures.
    ("U", 31, 0.710 - 1e-3, 0.741 - 1e-3),
    # Round V (15 rows, 1 ambiguous; 2026-12-06; training chronicles of large runs and HPC sites'
    # documents): scored on a frozen copy of commit 8e2eda3 (round U's families in) before any rule
    # was changed for it: 0.600 (0.571 unambiguous), macro-F1 0.630, the same with --no-learned.
    # After its family (an uncaught C++ exception beats the SIGABRT it causes): 0.667 (0.643),
    # macro-F1 0.697. Floors at today's figures.
    ("V", 15, 0.667 - 1e-3, 0.643 - 1e-3),
    # Round W (11 rows, none ambiguous; 2026-12-06; training logbooks, post-mortems, Chinese and
    # Japanese FAQs): scored on a frozen copy of commit 8777676 before any rule was changed for it:
    # 0.636 (the same on its unambiguous rows), macro-F1 0.650, the same with --no-learned. Its four
    # misses are no family a rule can name from the text (see harvest-README.md); floors at the
    # first score.
    ("W", 11, 0.636 - 1e-3, 0.636 - 1e-3),
    # Round X (38 rows, 9 ambiguous; 2026-12-06; sites' and platforms' documents, scientific codes'
    # and research repositories' threads): scored on a frozen copy of commit 32afdbe before anything
    # was changed for it: 0.684 (0.759 unambiguous), macro-F1 0.734, the same with --no-learned.
    # With the learned model's lean (a guess where no rule, or only a weak catch-all, decided;
    # designed on rounds L-W before X was scored): 0.711 (0.793); the error-line guard added after
    # it took that one row back. After its families (CUDA's unsupported-PTX error as the
    # driver/toolkit mismatch, exit status 140 as LSF's run limit, a bare metrics row turning NaN):
    # 0.763 (0.862), macro-F1 0.801. Floors at today's figures.
    ("X", 38, 0.763 - 1e-3, 0.862 - 1e-3),
    # Round Y (27 rows, 10 ambiguous; 2026-12-06; leads left by round X's harvesters, Ascend/HCCL
    # documents and Chinese threads, forums, LLM post-training frameworks' threads): scored on a
    # frozen copy of commit c987cb6 (the lean shipped) before anything was changed for it: 0.593
    # (0.765 unambiguous), macro-F1 0.528, the same with --no-learned. After its families (HCCL's
    # timeout and RoCE error CQE, datasets' own disk check, HIP runtime errors, a step cancel below
    # the crash that made srun cancel it, CUDA's devices-unavailable as the node's GPU, TF's queues
    # closed at exit): 0.815 (0.941), macro-F1 0.793. Floors at today's figures.
    ("Y", 27, 0.815 - 1e-3, 0.941 - 1e-3),
    # Round Z (47 rows, 23 ambiguous; 2026-12-06; leads left by round Y, accelerator vendors'
    # documents (MindSpore/Ascend, NVIDIA GPU Operator, SageMaker HyperPod, ModelArts, XLA), GPU
    # infrastructure tools' threads): scored on a frozen copy of commit 0dc7b3b before anything was
    # changed for it: 0.596 (0.667 unambiguous), macro-F1 0.737; rules alone 0.532 (0.625): the
    # learned lean's three changes were all right. After its families (the device plugin's
    # XidCriticalError as an Xid, Ray's OOM-prevention pointer, Ascend's device allocation failure,
    # compilers and NCCL builds without the GPU's architecture, HCCL's collective mismatch, kubelet
    # without the nvidia runtime, enroot's squashfs, slurmctld setting a node FAIL): 0.745 (0.958),
    # macro-F1 0.826. Floors at today's figures.
    ("Z", 47, 0.745 - 1e-3, 0.958 - 1e-3),
    # Round AA (30 rows, 16 ambiguous; 2026-12-06; cloud vendors' and accelerator vendors' documents,
    # the rarest labels by their systems' words): scored on a frozen copy of commit b4e3b85 before
    # anything was changed for it: 0.567 (0.643 unambiguous), macro-F1 0.654; rules alone 0.533
    # (0.571): the lean's one change was right. After its families (NumPy's ABI checks, LBNL NHC's
    # InfiniBand checks, slurmd's Security violation from another uid): 0.667 (0.857), macro-F1
    # 0.741. Floors at today's figures.
    ("AA", 30, 0.667 - 1e-3, 0.857 - 1e-3),
    # Round AB (46 rows, 26 ambiguous; 2026-12-07; LLM-training, infrastructure, scientific-code
    # threads and HPC centres' documents): scored on a frozen copy of commit 684c3e4 (the model
    # retrained on A-AA, lean floor 0.4) before anything was changed for it: 0.478 (0.700
    # unambiguous), macro-F1 0.583; rules alone 0.435 (0.650); with the lean floor at 0.5, 0.457.
    # After its families (a node's scheduler reason naming an Xid, ROCm's HSA out of resources,
    # a peer at Docker's bridge address, a tool that needs root, Open MPI's fatal error handler over
    # the step cancel, TensorFlow's NUMA notices as weak success): 0.609 (0.800), macro-F1 0.646.
    # Floors at today's figures.
    ("AB", 46, 0.609 - 1e-3, 0.800 - 1e-3),
    # Round AC (35 rows, 15 ambiguous; 2026-12-07; the rarest labels by their systems' words, forum-
    # like issue threads, log files committed to repositories, other accelerators' threads): scored
    # on a frozen copy of commit 13031de (round AB's families in) before anything was changed for
    # it: 0.743 (0.800 unambiguous), macro-F1 0.797; rules alone 0.714 (0.750). After its families
    # (verbs poll-CQ errors as ParaStation MPI prints them, `rdma link` ports DOWN, amdgpu's VBIOS
    # failing at POST, NPU/XPU/HPU/MPS out of memory, a GPU in a confidential-computing mode the
    # host lacks, JAX probing absent backends as weak success): 0.914 (0.950), macro-F1 0.906.
    # Floors at today's figures.
    ("AC", 35, 0.914 - 1e-3, 0.950 - 1e-3),
    # Round AD (32 rows, 23 ambiguous; 2026-12-07; accelerators' threads, scientific HPC codes, ML
    # infrastructure and storage tools) and round AE (16 rows, 8 ambiguous; log files committed to
    # repositories: MLPerf results, site notes; a harvester that finished after AD was scored): both
    # scored on a frozen copy of commit 49955e4 (round AC's families in) before anything was changed
    # for them: AD 0.469 (0.667 unambiguous), macro-F1 0.459, rules alone 0.406 (0.667); AE 0.625
    # (0.625), macro-F1 0.611, rules alone 0.562 (0.500). After their families (Level Zero's out of
    # device memory, libfabric's completion errors as Cray MPICH prints them, Ray's cluster version
    # check, a registry's pull rate limit, MLPerf's MODEL DIVERGED and its run_stop success): AD
    # 0.562 (0.889), macro-F1 0.535; AE 0.750 (0.875), macro-F1 0.719. Floors at today's figures.
    ("AD", 32, 0.562 - 1e-3, 0.889 - 1e-3),
    ("AE", 16, 0.750 - 1e-3, 0.875 - 1e-3),
    # Round AF (36 rows, 22 ambiguous; 2026-12-07; ROCm's issue threads read whole, other mirrored
    # threads, MLPerf results and bigscience logs): scored on a frozen copy of commit 655d1af (rounds
    # AD/AE's families in) before anything was changed for it: 0.389 (0.643 unambiguous), macro-F1
    # 0.389; the same with the rules alone (the one lean was wrong). Three of its misses were round
    # AB's own new row: rocminfo's bare HSA_STATUS_ERROR_OUT_OF_RESOURCES on an unsupported GPU read
    # as device OOM. After its families (that row narrowed to the free-memory figure, ROCm's runtime
    # failing to start as environment, AMDGPU.jl's kernel exception as the program's assert): 0.500
    # (0.929), macro-F1 0.491. Floors at today's figures.
    ("AF", 36, 0.500 - 1e-3, 0.929 - 1e-3),
    # Round AG (11 rows, 5 ambiguous; 2026-12-07; MLPerf/AlgoPerf result logs and HPC centres'
    # documents; a harvester that finished after AF was scored): scored on a frozen copy of commit
    # 9c8d7e8 (round AF's families in) before anything was changed for it: 0.455 (0.500
    # unambiguous), macro-F1 0.633, the same with the rules alone. After its one family (a job
    # accounting record's jobstate=TIMEOUT): 0.545 (0.667), macro-F1 0.693. Left: four good MLPerf
    # runs with alarming lines after their success. Floors at today's figures.
    ("AG", 11, 0.545 - 1e-3, 0.667 - 1e-3),
    # Round AH (32 rows, 13 ambiguous; 2026-12-07; HPC centres' help-forum threads and notes, GPU
    # and host hardware incident notes, ML-framework threads, IO500 and UCX threads): scored on a
    # frozen copy of commit 83aa4a1 before anything was changed for it: 0.594 (0.684 unambiguous),
    # macro-F1 0.561; the same accuracy with the rules alone. After its families (a host DIMM in the
    # BMC's event log as node failure, a task hung in a network filesystem's kernel module, a kernel
    # module that will not load, BLAS's illegal-argument check, Python's SIGKILLed child, the OOM
    # kill above the fabric errors it causes, Intel Fortran's abort trap, WRF's fatal banner,
    # Lightning's end of fit): 0.875 (1.000), macro-F1 0.914. Floors at today's figures.
    ("AH", 32, 0.875 - 1e-3, 1.000 - 1e-3),
    # Round AI (49 rows, 24 ambiguous; 2026-12-07; the University of Geneva HPC help forum, job
    # output and notes committed to repositories, scientific HPC codes' threads): scored on a frozen
    # copy of commit ce5d42c (round AH's families in) before anything was changed for it: 0.531
    # (0.600 unambiguous), macro-F1 0.532; rules alone 0.490 (0.560). After its families (seff's
    # COMPLETED/TIMEOUT summary, sacct's cut OUT_OF_ME+, HPE Cray's under_oom, HPC codes' device
    # allocation failures, nvidia-smi's `No devices were found`, BeeGFS's ECOMM): 0.673 (0.800),
    # macro-F1 0.635. Floors at today's figures.
    ("AI", 49, 0.673 - 1e-3, 0.800 - 1e-3),
    # Round AJ (27 rows, 12 ambiguous; 2026-12-07; the Geneva forum again, pyxis/enroot threads,
    # committed job output, LLM-training threads): scored on a frozen copy of commit 2105667 (the
    # A-AI model, the run_stop analyzer) before anything was changed for it: 0.593 (0.733
    # unambiguous), macro-F1 0.694, the same with the rules alone. After its families (Slurm's
    # plugin loader failing, a test program's PASS verdict): 0.667 (0.867), macro-F1 0.730.
    ("AJ", 27, 0.667 - 1e-3, 0.867 - 1e-3),
    # Round AK (48 rows, 25 ambiguous; 2026-12-07; scientific HPC codes' threads (WarpX, SPECFEM,
    # NOAA), committed job output, GPU-cluster health-check and image threads, web pages): scored
    # on a frozen copy of commit 1919e74 before anything was changed for it: 0.500 (0.783
    # unambiguous), macro-F1 0.550; rules alone 0.417 (0.652): four leans, all right. After its
    # families (CUDA's stub-library error, a host DIMM's ECC error at POST above the GPU's ECC row,
    # MPICH's fatal-error handler above the step cancel, GCC's OOM-killed cc1plus, a simulation's
    # end-of-run summary): 0.562 (0.913), macro-F1 0.596. Floors at today's figures.
    ("AK", 48, 0.562 - 1e-3, 0.913 - 1e-3),
    # Round AL (40 rows, 23 ambiguous; 2026-12-07; large-model training frameworks' threads,
    # committed job output and notes, MPI/fabric/scheduler threads, web pages, scientific-ML codes'
    # threads): scored on a frozen copy of commit 1db4552 (the A-AK model) before anything was
    # changed for it: 0.625 (0.882 unambiguous), macro-F1 0.732; rules alone 0.600 (0.824). After its
    # families (a success line after routine fp16 overflow skips, a bare step cancel after a task's
    # own failure, Gaudi's device allocator, pinned host memory, LSF's 128+N exit codes, NEMO's
    # stability check, glog's fatal CHECK): 0.800 (1.000), macro-F1 0.865. Floors at today's figures.
    ("AL", 40, 0.800 - 1e-3, 1.000 - 1e-3),
    # Round AM (41 rows, 21 ambiguous; 2026-12-07; non-English notes (Chinese, Portuguese), non-NVIDIA
    # accelerators' threads (ROCm, Intel XPU, Ascend), Kubernetes and cloud training threads,
    # workflow managers' threads): scored on a frozen copy of commit 8ef006d before anything was
    # changed for it: 0.585 (0.650 unambiguous), macro-F1 0.754; rules alone 0.512 (0.550). After its
    # families (glibc's messages in the node's locale, Ascend's EJ0001, ROCm's GPU page fault, a
    # toolchain too old or broken, workflow managers' completion lines, OpenPBS's preemption, the
    # Snakemake plugin's Slurm TIMEOUT): 0.780 (0.950), macro-F1 0.855. Floors at today's figures.
    ("AM", 41, 0.780 - 1e-3, 0.950 - 1e-3),
    # Round AN (36 rows, 16 ambiguous; 2026-12-07; RL and multimodal fine-tuning frameworks' threads,
    # committed job output, speech/NLP toolkits' threads (Marian, ESPnet), vision and 3D codes'
    # threads): scored on a frozen copy of commit 47654c3 (the A-AM model, never answering) before
    # anything was changed for it: 0.611 (0.500 unambiguous), macro-F1 0.661; rules alone 0.583
    # (0.450). After its families (a short loss series that blows up by orders of magnitude,
    # Marian's GPU assert and abort, tiny-cuda-nn's cudaMalloc, JAX's `No visible GPU devices`,
    # cuRAND's initialisation failure): 0.806 (0.800), macro-F1 0.840. A bare SIGBUS read as shared
    # memory (host_oom) since 2026-12-07 costs its one bare `Bus error` labelled crash_signal (an
    # ambiguous row) and fixes six host_oom rows elsewhere: 0.778. Floors at today's figures.
    ("AN", 36, 0.778 - 1e-3, 0.800 - 1e-3),
    # Round AO (53 rows, 24 ambiguous; 2026-12-07): graph/recsys/boosting, bio and weather models,
    # GPU simulation codes, JAX/TF stacks and GPU-cluster infrastructure threads; scored on a frozen
    # copy of commit c962c4b before anything was changed for it: 0.528 (0.586 unambiguous), macro-F1
    # 0.631; rules alone 0.509 (0.552). After its families (CUDA's "out of memory" as SPECFEM, HugeCTR
    # and Thrust print it, a loop that skips the batch on OOM, a gradient-boosting training metric
    # that diverges, NVML's Unknown Error in a container, DCGM's API version mismatch, DCGM's Page
    # Retirement/Row Remap result): 0.698 (0.793), macro-F1 0.820. Floors at today's figures.
    ("AO", 53, 0.698 - 1e-3, 0.793 - 1e-3),
    # Round AP (33 rows, 20 ambiguous; 2026-12-07): diffusion-training, open-LLM fine-tuning, robotics
    # RL and speech/voice training threads; scored on a frozen copy of commit 14986c6 before anything
    # was changed for it: 0.848 (0.923 unambiguous), macro-F1 0.807; rules alone 0.788 (0.846). After
    # its family (NaN in torch.distributions' parameters and torch.normal's std, `NaN detected in`):
    # 0.939 (1.000), macro-F1 0.836. Floors at today's figures.
    ("AP", 33, 0.939 - 1e-3, 1.0 - 1e-3),
    # Round AQ (37 rows, 22 ambiguous; 2026-12-08): GPU compute outside ML (miners, volunteer computing),
    # LLM inference engines, computer-vision training, cloud/cluster job orchestration and ML interatomic
    # potentials; scored on a frozen copy of commit e56dcbe before anything was changed for it: 0.541
    # (0.667 unambiguous), macro-F1 0.554; rules alone 0.486 (0.533). After its families (a C++ runtime's
    # `CUDA runtime error: out of memory`, OpenCL's and Vulkan's device-allocation codes, a cloud quota
    # refusal behind a DOWN node, Kubernetes' active-deadline message): 0.649 (0.867), macro-F1 0.624.
    ("AQ", 37, 0.649 - 1e-3, 0.867 - 1e-3),
    # Round AR (26 rows, 17 ambiguous; 2026-12-08): LLM pre-training frameworks, non-CUDA accelerator
    # stacks (Neuron, Gaudi, Tenstorrent, MLX), multimodal training, embedding/quantization/MoE codes,
    # other batch systems and time-series/federated codes; scored on a frozen copy of commit 8c2e28d
    # before anything was changed for it: 0.615 (0.778 unambiguous), macro-F1 0.692; rules alone the
    # same. After its families (recurring loss spikes that end the series, Neuron CCOM timeouts, an
    # accelerator that does not come back after a reset, Torque's MOM unreachable, a compiler's
    # internal error): 0.846 (0.889), macro-F1 0.916.
    ("AR", 26, 0.846 - 1e-3, 0.889 - 1e-3),
    # Round AS (36 rows, 14 ambiguous; 2026-12-08): LLM evaluation harnesses, data processing and
    # loading at scale, model serving and notebooks on Kubernetes, HPC containers and filesystems, RL
    # post-training frameworks; scored on a frozen copy of commit cc57dd4 before anything was changed
    # for it: 0.750 (0.773 unambiguous), macro-F1 0.802; rules alone the same. After its families
    # (RAPIDS' rmm::out_of_memory, no longer taken for Slurm's OUT_OF_MEMORY; JuiceFS timing out on
    # its object store; a truncated tar or compressed shard): 0.861 (0.818), macro-F1 0.860.
    ("AS", 36, 0.861 - 1e-3, 0.818 - 1e-3),
    # Round AT (28 rows, 15 ambiguous; 2026-12-08): speech, 3D-vision, LLM fine-tuning, scientific-ML
    # and video-understanding training threads; scored on a frozen copy of commit 84ee606 before
    # anything was changed for it: 0.714 (0.769 unambiguous), macro-F1 0.621; rules alone 0.714
    # (0.769). After its family (a trainer's own divergence check, `Loss exploded`; SciPy L-BFGS's
    # `Objective function value: nan`; DeepXDE's bracketed metrics row gone NaN): 0.821 (1.000),
    # macro-F1 0.666.
    ("AT", 28, 0.821 - 1e-3, 1.0 - 1e-3),
    # Round AU (33 rows, 16 ambiguous; 2026-12-08): robot-learning, OCR/document-AI, distributed-training
    # libraries, Chinese large-model frameworks and hyper-parameter search threads; scored on a frozen
    # copy of commit b429538 before anything was changed for it: 0.545 (0.588 unambiguous), macro-F1
    # 0.543; rules alone 0.485 (0.529). After its families (MXNet's `CUDA: out of memory`, Paddle's
    # shared-memory map failure, Dask's memory budget, pip's failed builds, a library refusing a
    # keyword of another version): 0.727 (0.824), macro-F1 0.635.
    ("AU", 33, 0.727 - 1e-3, 0.824 - 1e-3),
]


@pytest.mark.parametrize(("prefix", "rows", "accuracy", "unambiguous"), ROUND_FLOORS, ids=[r[0] for r in ROUND_FLOORS])
def test_harvest_round_keeps_its_floor(tmp_path, prefix: str, rows: int, accuracy: float, unambiguous: float) -> None:
    corpus = _rounds(tmp_path, lambda r: r == prefix)
    report = evaluate_corpus(corpus)
    assert report.total == rows
    assert report.accuracy >= accuracy, report.mistakes
    # A round with no ambiguous row has no separate unambiguous report: its rows are all unambiguous.
    clear = report.unambiguous if any(row.ambiguous for row in load_corpus(corpus)) else report
    assert clear is not None and clear.accuracy >= unambiguous, report.mistakes
