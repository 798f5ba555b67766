"""Issue 12's acceptance: the fault matrix, one case per row, on the REAL dev cluster, in act mode.

Each case submits a real sbatch job (1 or 2 nodes) that prints the fault's log lines and fails (a
real TIMEOUT for the time-limit row), then calls `flows.post_failure.post_failure(job_id,
facts=...)` with what the epilog's event carries, and reads the end state back from the sources
of truth, never from the flow's own report:

- Slurm, with scontrol: each node's State and Reason (and a pending NextState), the job's
  JobState, Restarts, ExcNodeList, TimeLimit, and for a resubmission the new job (found by its
  `--comment` tag), its ExcNodeList and its output;
- the journal: ActionRecord rows (kind, target, state) in order, and the RMA tickets;
- the mail (a real aiosmtpd receiver): the ops mail names the cause/signature and the actions,
  the user mail goes to the job's owner, an RMA ticket is a mail of its own.

Per-node evidence on a cluster whose 4 "nodes" are one host behind one sshd: the configured node
commands take `{node}`, so the kernel log is `cat <dir>/kernel-{node}.log` and the quick node
check is `cat <dir>/nodecheck-{node}.json`, written per case (the culprit gets the fault's real
kernel lines and, where the hardware stays broken, a failing NodeCheckReport; the others a clean
log and an OK report). That is recorded input, as a node's dmesg would be; the verdicts, the
decisions, the Slurm changes, the journal and the mail are all real. There is no nvidia-smi and
no dcgmi on the dev cluster: a GPU reset fails for real ("not found"), DCGM is unavailable for
real, and the RebootProgram is /bin/true.

Sources of the fault lines (each row names its own):
- NVIDIA: the Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
  for the numbers, buckets and meanings; the line layout `NVRM: Xid (PCI:<bus>): <n>, pid=...,
  name=..., <message>` is the driver's, messages as quoted in public reports already used by
  tests/fixtures (classifiers/harvest.jsonl, suspects/, node/kernel/).
- Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 5): the root-cause categories
  of the 419 unexpected interruptions (faulty GPU, HBM3, software bug, network switch/cable, host
  maintenance, GPU SRAM, GPU system processor, NIC, NCCL watchdog timeouts, SSD, ...).
- PyTorch: ProcessGroupNCCL watchdog lines and flight-recorder dumps (see
  tests/fixtures/suspects/README.md), `[rankN]:` prefixes, CUDA's error strings as PyTorch
  raises them (`cudaGetErrorString`), torch.save's PytorchStreamWriter error.
- NCCL (`host:pid:tid [dev] file:line NCCL WARN ...`, src/debug.cc; net_ib.cc's completion
  error), Slurm (slurmstepd/srun messages), the Linux mlx5 driver (link down / port module event).

Between cases every node a case touched is put back (`scontrol update State=RESUME`, after
`scontrol cancel_reboot`, which Slurm 22.05 refuses once the reboot is ISSUED - RESUME alone
clears a REBOOT_ISSUED node) and every job is cancelled, in a finally block.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pitstop.models import CheckResult, CheckStatus, NodeCheckReport
from pitstop.store.tables import ActionRecord, Incident, Ticket
from tests.cluster.conftest import dev_cluster_env, slurm_cluster, sshd  # noqa: F401  (session fixtures)
from tests.flows.conftest import act_on_dev_cluster, rows, wait_for
from tests.flows.test_dev_cluster import SMALL_CLUSTER_LIMITS, _scontrol_field

ON_THE_CLUSTER = [pytest.mark.cluster, pytest.mark.prefect, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FLIGHT_RECORDER_RANK5_LAGS = FIXTURES / "suspects" / "fr_rank5_lags"  # 8 ranks; rank 5 lags


# --- fault lines ---------------------------------------------------------------------------------
# `{n0}` / `{n1}` are the job's first / second node (Slurm's order), filled in by the job itself
# at run time (`scontrol show hostnames $SLURM_JOB_NODELIST`), as a real NCCL/srun line names them.

def _xid(pci: str, xid: int, message: str, *, pid: str = "71357", name: str = "python", up: str = "7214.332113") -> str:
    """A kernel line as the NVIDIA driver prints it (dmesg with its uptime stamp)."""
    return f"[ {up}] NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name={name}, {message}"


# NVIDIA driver: the identity lines it prints when a GPU first errors (the RMA ticket reads them).
GPU_IDENTITY = ("[ 7214.331001] NVRM: GPU at PCI:0000:3b:00: GPU-5b3b2d0f-0e59-8d4c-1a5c-6b3e2f1a9c7d",
                "[ 7214.331002] NVRM: GPU Board Serial Number: 1652221012345")
CLEAN_KERNEL = ("[    5.123456] mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged",)

# PyTorch: what a rank prints when its CUDA context dies under it (cudaErrorLaunchFailure).
CUDA_LAUNCH_FAILURE = "[rank0]: RuntimeError: CUDA error: unspecified launch failure"
# PyTorch: cudaErrorECCUncorrectable's text, as every process on an ECC-faulted GPU sees it.
CUDA_ECC = "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
STEP = "step 1200 | loss 2.3114 | lr 2.9e-04"


def _watchdog(rank: int, seq: int = 42) -> str:
    """PyTorch 2.4+ ProcessGroupNCCL watchdog line (tests/fixtures/suspects/rank5_lag.log)."""
    return (f"[rank{rank}]:[E302 10:25:02.164985300 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=4194304, "
            f"NumelOut=4194304, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")


# --- node checks ---------------------------------------------------------------------------------

def _check(node: str, failing: tuple[str, str] | None = None) -> str:
    """A `pitstop node-check --json` report: OK, or FAIL with one failing check (name, summary in
    the words pitstop/node/nvml.py and infiniband.py use)."""
    checks = [
        CheckResult(name="nvml", status=CheckStatus.OK, summary="8 GPU(s) healthy (driver 550.90.07)"),
        CheckResult(name="xid", status=CheckStatus.OK, summary="no new Xid events"),
        CheckResult(name="ib", status=CheckStatus.OK, summary="2 IB port(s) ACTIVE/LinkUp (400 Gb/sec (4X NDR))"),
        CheckResult(name="disk", status=CheckStatus.OK, summary="all filesystems below 90 % used"),
    ]
    if failing is not None:
        name, summary = failing
        checks = [CheckResult(name=name, status=CheckStatus.FAIL, summary=summary) if c.name == name else c for c in checks]
    overall = CheckStatus.FAIL if failing else CheckStatus.OK
    return NodeCheckReport(node=node, checked_at=datetime.now(timezone.utc).isoformat(), overall=overall,
                           checks=checks).model_dump_json()


GPU_LOST = ("nvml", "GPU 3 (00000000:3B:00.0) is lost to the driver: drain and reboot the node")
DBE = ("nvml", "GPU 3 (00000000:3B:00.0): 2 uncorrectable ECC error(s) since reset: drain and reset the GPU")
REMAP_FAILED = ("nvml", "GPU 3 (00000000:3B:00.0): row remapping failed, no spare rows left: drain, replace the GPU")
SRAM_DBE = ("nvml", "GPU 3 (00000000:3B:00.0): 1 uncorrectable ECC error(s) since reset: drain and reset the GPU")
RESET_NEEDED = ("nvml", "GPU 3 (00000000:3B:00.0) raised Xid [95]: drain, follow the Xid's action")
IB_DOWN = ("ib", "mlx5_0 port 1 is DOWN (want ACTIVE): check the cable and the subnet manager")


# --- the matrix ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    source: str  # where the fault's lines come from
    job_lines: tuple[str, ...]  # what the job prints (stderr) before it exits 1
    cause: str
    signature: str
    nodes: int = 1
    real_timeout: bool = False  # the job really runs into its time limit (instead of printing lines)
    kernel: dict[int, tuple[str, ...]] = field(default_factory=dict)  # node index -> its kernel lines
    failing: dict[int, tuple[str, str]] = field(default_factory=dict)  # node index -> failing check
    flight_recorder: Path | None = None  # dumps the job leaves in its work dir
    # end state
    drained: tuple[int, ...] = ()  # nodes out of service at the end, with Pitstop's reason
    requeued: bool = False  # in place: Restarts=1
    excluded: tuple[int, ...] = ()  # ExcNodeList of the job that runs next
    resubmitted_env: dict[str, str] = field(default_factory=dict)  # a new job with these variables
    time_limit: str | None = None  # TimeLimit of the job that runs next
    journal: tuple[str, ...] = ()  # "kind target state", seq order; targets n0/n1/job/user/ops/-
    tickets: tuple[int, ...] = ()  # RMA tickets, by node
    mail: tuple[str, ...] = ()  # in the ops mail ({n0}, {n1}, {job} filled in)
    wait_rerun: bool = False  # also wait for the job's next run to complete and check where it ran
    bugs: tuple[str, ...] = ()  # keys of BUGS: the row states what is right and fails until they are fixed


# Product bugs this matrix found (see the report of issue 12's acceptance). A row that names one
# is an expected failure (strict: it must start passing when the bug is fixed, then drop the key).
BUGS = {
    "reset-exit-code": "tasks/act.py _gpu_reset: `ok = result.status is HostStatus.OK` ignores the exit code; "
                       "SshRunner answers OK for a command that ran and failed, so `nvidia-smi --gpu-reset` exiting "
                       "127 (not found) is journaled done",
    "failed-rung-resumes": "tasks/remediate.py carry_out runs the diag and resume planned after a fix rung even "
                           "when the rung failed; a passing check then resumes a node whose GPU reset never "
                           "happened, and escalation._should_climb never climbs because the node was resumed",
    "dcgm-missing-is-rma": "tasks/act.py _diag gives passed=False when dcgmi is missing at level >= 2 and "
                           "escalation._should_climb reads that as a failed check: a node that passes its node "
                           "check climbs to an RMA ticket because DCGM is not installed",
}
# Checked on every row that leaves a node out (see _reboot_left_pending): `scontrol reboot ASAP
# nextstate=RESUME` makes Slurm clear DRAIN and the reason once the node is back (scontrol(1)),
# so a node Pitstop keeps out with an RMA ticket returns to service after its reboot.
BUG_REBOOT_RESUMES = ("pitstop/cluster/slurm.py SlurmScheduler.reboot uses `scontrol reboot ASAP nextstate=RESUME`: "
                      "after the reboot Slurm clears DRAIN and the reason, so {node} (kept out by incident {incident}"
                      "{ticket}) returns to service; and the check after the reboot ran at once, while the node was "
                      "still {state}")

# The tail every job incident's plan ends with (rules list notify_user before notify_ops).
TELL = ("notify_user user done", "notify_ops ops done")
# A failed GPU reset must not end in a resume: whether the check after it runs ("*") is the fix's
# choice; then the next rung (reboot) runs in the same incident.
RESET_REBOOT = ("drain n0 done", "requeue job done", "gpu_reset n0 failed", "diag n0 *", "resume n0 skipped",
                *TELL, "reboot n0 done", "diag n0 done")

CASES = [
    Case("faulty-gpu-xid79",
         "Llama 3 Table 5 'Faulty GPU' (30.1 %); NVIDIA Xid 79 GPU_HAS_FALLEN_OFF_THE_BUS, bucket RESTART_BM; "
         "line as in wilicc/gpu-burn#1; the node check keeps failing (NVML: GPU lost)",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_hardware", "xid-79",
         kernel={0: (*GPU_IDENTITY, _xid("0000:3b:00", 79, "GPU has fallen off the bus.", pid="'<unknown>'", name="<unknown>"))},
         failing={0: GPU_LOST},
         drained=(0,), requeued=True, excluded=(0,),
         # reboot (rung 1), check fails -> DCGM level 3 (rung 2), fails -> RMA ticket (rung 3)
         journal=("drain n0 done", "requeue job done", "reboot n0 done", "diag n0 done", "resume n0 skipped", *TELL,
                  "diag n0 done", "resume n0 skipped", "rma_ticket n0 done"),
         tickets=(0,),
         mail=("gpu_hardware (xid-79)", "Xid (PCI:0000:3b:00): 79", "drain {n0}: done", "requeue {job}: done",
               "reboot {n0}: done", "rma_ticket {n0}: done")),
    Case("hbm3-xid48",
         "Llama 3 Table 5 'GPU HBM3 Memory' (17.2 %); NVIDIA Xid 48 DBE, bucket WORKFLOW_XID_48; line as in "
         "tests/fixtures/classifiers (Xid 48 DBE report); NVML keeps counting the DBE",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_memory", "xid-48",
         kernel={0: (*GPU_IDENTITY, _xid("0000:3b:00", 48, "An uncorrectable double bit error (DBE) has been detected on GPU "
                                         "in the framebuffer at partition 6, subpartition 0.", pid="'<unknown>'", name="<unknown>"))},
         failing={0: DBE},
         drained=(0,), requeued=True, excluded=(0,),
         # a GPU reset first (it activates the row remap); here it fails (no GPU), so the next rung: RMA
         journal=("drain n0 done", "requeue job done", "gpu_reset n0 failed", "diag n0 *", "resume n0 skipped", *TELL,
                  "rma_ticket n0 done"),
         tickets=(0,),
         mail=("gpu_memory (xid-48)", "double bit error", "drain {n0}: done", "rma_ticket {n0}: done"),
         wait_rerun=True),
    Case("row-remap-event-xid63",
         "NVIDIA Xid 63 INFOROM_DRAM_RETIREMENT_EVENT, bucket IGNORE; line as in tests/fixtures/suspects "
         "(kernel_gpu01_linkdown.txt); the job's log names nothing else",
         (STEP,), "gpu_memory", "xid-63",
         kernel={0: (_xid("0000:3b:00", 63, "Row Remapper: New row (0x0000000003a4b1c0) marked for remapping, reset gpu to activate."),)},
         journal=("notify_user user done",),
         mail=("gpu_memory (xid-63)", "Row Remapper", "notify_user root:")),
    Case("row-remap-failure-xid64",
         "NVIDIA Xid 64 INFOROM_DRAM_RETIREMENT_FAILURE (bucket RESET_GPU, investigatory CONTACT_SUPPORT; the "
         "policy's xid-64 rule); NVML: remapping failed, no spare rows",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_memory", "xid-64",
         kernel={0: (*GPU_IDENTITY, _xid("0000:3b:00", 64, "Row Remapper: row remapping failure, no spare rows left."))},
         failing={0: REMAP_FAILED},
         drained=(0,), requeued=True, excluded=(0,),
         journal=("drain n0 done", "requeue job done", "diag n0 done", "resume n0 skipped", *TELL, "rma_ticket n0 done"),
         tickets=(0,),
         mail=("gpu_memory (xid-64)", "drain {n0}: done", "rma_ticket {n0}: done")),
    Case("uncontained-xid95-reset-fails-reboot-fixes",
         "NVIDIA Xid 95 ROBUST_CHANNEL_UNCONTAINED_ERROR, bucket RESET_GPU (line in the format of the real "
         "Xid 94 reports in tests/fixtures, RST: Yes); no nvidia-smi here, so the reset fails; the check passes",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_memory", "xid-95",
         kernel={0: (_xid("0000:3b:00", 95, "Uncontained: SM (0x1). RST: Yes, D-RST: No"),)},
         requeued=True, excluded=(0,),
         journal=RESET_REBOOT + ("resume n0 done",),
         mail=("gpu_memory (xid-95)", "gpu_reset {n0}: FAILED", "reboot {n0}: done", "resume {n0}: done"),
         ),
    Case("uncontained-xid95-reset-fails-reboot-then-rma",
         "NVIDIA Xid 95 (as above); the node check keeps failing after the reboot: the ladder climbs to "
         "DCGM level 3 and the RMA ticket in the same incident",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_memory", "xid-95",
         kernel={0: (*GPU_IDENTITY, _xid("0000:3b:00", 95, "Uncontained: SM (0x1). RST: Yes, D-RST: No"))},
         failing={0: RESET_NEEDED},
         drained=(0,), requeued=True, excluded=(0,),
         journal=RESET_REBOOT + ("resume n0 skipped", "diag n0 done", "resume n0 skipped", "rma_ticket n0 done"),
         tickets=(0,),
         mail=("gpu_memory (xid-95)", "gpu_reset {n0}: FAILED", "reboot {n0}: done", "rma_ticket {n0}: done"),
         ),
    Case("gpu-sram-ecc",
         "Llama 3 Table 5 'GPU SRAM Memory' (4.5 %): CUDA's cudaErrorECCUncorrectable text in the job, no Xid "
         "in the kernel log, and NVML keeps counting the uncorrectable (SRAM) error: a sticky ECC fault",
         (STEP, CUDA_ECC), "gpu_memory", "ecc-uncorrectable",
         failing={0: SRAM_DBE},
         drained=(0,), requeued=True, excluded=(0,),
         # gpu_memory ladder: reboot (rung 1), DCGM level 3 (rung 2), RMA ticket (rung 3)
         journal=("drain n0 done", "requeue job done", "reboot n0 done", "diag n0 done", "resume n0 skipped", *TELL,
                  "diag n0 done", "resume n0 skipped", "rma_ticket n0 done"),
         tickets=(0,),
         mail=("gpu_memory (ecc-uncorrectable)", "uncorrectable ECC error encountered", "rma_ticket {n0}: done")),
    Case("gsp-xid119",
         "Llama 3 Table 5 'GPU System Processor' (3.8 %); NVIDIA Xid 119 GSP_RPC_TIMEOUT, bucket RESET_GPU; "
         "line as in vllm-project/vllm#40652 / NVIDIA/open-gpu-kernel-modules#446; the check passes",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_hardware", "xid-119",
         kernel={0: (_xid("0000:3b:00", 119, "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected "
                                          "function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."),)},
         requeued=True, excluded=(0,),
         journal=RESET_REBOOT + ("resume n0 done",),
         mail=("gpu_hardware (xid-119)", "GSP", "gpu_reset {n0}: FAILED", "resume {n0}: done"),
         ),
    Case("nvlink-xid74",
         "NVIDIA Xid 74 NVLINK_ERROR, bucket WORKFLOW_NVLINK_ERR; line as in tests/fixtures/classifiers "
         "(NVLink fatal error report); NCCL's 'unhandled cuda error' in the job; the check passes",
         (STEP, "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                "ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
         "gpu_hardware", "xid-74",
         kernel={0: (_xid("0000:86:00", 74, "NVLink: fatal error detected on link 7(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
                          pid="5512", name="python3"),)},
         requeued=True, excluded=(0,),
         journal=RESET_REBOOT + ("resume n0 done",),
         mail=("gpu_hardware (xid-74)", "NVLink: fatal error", "gpu_reset {n0}: FAILED", "resume {n0}: done"),
         ),
    Case("contained-xid94-damped",
         "NVIDIA Xid 94 ROBUST_CHANNEL_CONTAINED_ERROR, bucket RESTART_APP (self-clearing: the node acts at 3 in "
         "60 min); line as in tests/fixtures (real Xid 94 report)",
         (STEP, CUDA_LAUNCH_FAILURE), "gpu_memory", "xid-94",
         kernel={0: (_xid("0000:86:00", 94, "Contained: SM (0x1). RST: No, D-RST: No", pid="6001"),)},
         requeued=True, excluded=(),
         journal=("requeue job done", *TELL),
         mail=("gpu_memory (xid-94)", "requeue {job}: done", "1 of 3")),
    Case("nccl-watchdog-flight-recorder-env-resubmit",
         "Llama 3 Table 5 'NCCL Watchdog Timeouts' (1.7 %); PyTorch watchdog lines (rank5_lag.log format) and "
         "PyTorch flight-recorder dumps (tests/fixtures/suspects/fr_rank5_lags: rank 5 of 8 never entered "
         "collective 42); the nccl_timeout rule requeues with NCCL_* env: a resubmission with --export",
         (STEP, *(_watchdog(r) for r in (0, 1, 2, 3, 4, 6, 7))), "nccl_timeout", "nccl-watchdog-timeout",
         nodes=2, flight_recorder=FLIGHT_RECORDER_RANK5_LAGS,
         excluded=(1,), resubmitted_env={"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_IB_TIMEOUT": "22"},
         journal=("requeue job done", *TELL),
         mail=("nccl_timeout (nccl-watchdog-timeout)", "requeue {job}: done", "resubmitted job {job} as", "{n1}",
               "flight recorder")),
    Case("network-cable-ib-link-down",
         "Llama 3 Table 5 'Network Switch/Cable' (8.4 %): NCCL's NET/IB completion error (net_ib.cc, "
         "tests/fixtures/suspects/fabric_gpu01.log) from the second node's rank, and that node's mlx5 kernel "
         "lines (Port 1 link down; mlx5_port_module_event Cable error); its IB check says the port is DOWN",
         (STEP,
          "{n1}:52113:52190 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<46186> "
          "with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.2 remoteGid ::ffff:10.0.0.1",
          "[rank7]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
          *(_watchdog(r, 1822) for r in (0, 1, 2, 3))),
         "network_fabric", "nccl-ib-completion-error", nodes=2,
         kernel={1: ("[ 8012.114201] mlx5_core 0000:17:00.0: Port 1 link down",
                     "[ 8012.114388] mlx5_core 0000:17:00.0: mlx5_port_module_event:1161:(pid 0): Port module "
                     "event[error]: module 0, Cable error, Bus stuck (I2C or data shorted)")},
         failing={1: IB_DOWN},
         drained=(1,), requeued=True, excluded=(1,),
         # fabric ladder: diag level 1 (rung 1) fails -> reboot (rung 2), check fails -> ticket (rung 3)
         journal=("drain n1 done", "requeue job done", "diag n1 done", "resume n1 skipped", *TELL,
                  "reboot n1 done", "diag n1 done", "resume n1 skipped", "rma_ticket n1 done"),
         tickets=(1,),
         mail=("network_fabric (nccl-ib-completion-error)", "drain {n1}: done", "link down")),
    Case("host-maintenance-node-down",
         "Llama 3 Table 5 'Host Maintenance' (7.6 %): Slurm's srun/slurmstepd node-failure messages "
         "(tests/fixtures/suspects/node_failure.log) naming the second node; it came back and passes its check",
         (STEP, "srun: error: Node failure on {n1}",
          "slurmstepd: error: *** STEP 88214.0 ON {n0} CANCELLED AT 2026-03-02T10:20:11 DUE TO NODE FAILURE, SEE "
          "SLURMCTLD LOG FOR DETAILS ***",
          "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
          "srun: error: {n0}: tasks 0-3: Killed"),
         "node_failure", "slurm-node-fail", nodes=2,
         drained=(1,), requeued=True, excluded=(1,),
         # node ladder: reboot, then DCGM level 2, which cannot run here: the node stays out for a
         # human (handed over), no ladder climb and no RMA ticket for a node that passes its check
         journal=("drain n1 done", "requeue job done", "reboot n1 done", "diag n1 done", "resume n1 skipped", *TELL),
         mail=("node_failure (slurm-node-fail)", "drain {n1}: done", "requeue {job}: done",
               "level 2 diagnostics could not run"),
         ),
    Case("software-bug-traceback",
         "Llama 3 Table 5 'Software Bug' (12.9 %): a Python traceback (KeyError) from the training script",
         (STEP, "Traceback (most recent call last):", '  File "/home/user/train.py", line 310, in <module>',
          "    main()", '  File "/home/user/train.py", line 287, in main',
          '    loss = model(batch["input_ids"], labels=batch["labels"])', "KeyError: 'labels'"),
         "software_bug", "py-KeyError",
         journal=("notify_user user done",),
         mail=("software_bug (py-KeyError)", "KeyError: 'labels'", "notify_user root:")),
    # A guess is reported, never acted on (the policy's `guesses`): storage_io's own rule would requeue.
    Case("learned-guess-over-a-bare-traceback-only-reports",
         "ARCC-RACE/deepracer-for-dummies#23 (harvest row L-storage_io-b03): a checkpoint upload to an S3 store "
         "dies inside boto3 with no exception line; the rules see a bare traceback (weak), the learned model "
         "leans storage_io below its answering threshold",
         (STEP, "Traceback (most recent call last):",
          "  File \"training_worker.py\", line 108, in training_worker",
          "    graph_manager.save_checkpoint()",
          "  File \"/usr/local/lib/python3.6/dist-packages/rl_coach/graph_managers/graph_manager.py\", line 624, in save_checkpoint",
          "    data_store.save_to_store()",
          "  File \"/opt/ml/code/markov/s3_boto_data_store.py\", line 144, in save_to_store",
          "    raise e",
          "  File \"/opt/ml/code/markov/s3_boto_data_store.py\", line 100, in save_to_store",
          "    Key=self._get_s3_key(rel_name))",
          "  File \"/usr/local/lib/python3.6/dist-packages/boto3/s3/inject.py\", line 131, in upload_file",
          "    extra_args=ExtraArgs, callback=Callback)",
          "  File \"/usr/local/lib/python3.6/dist-packages/boto3/s3/transfer.py\", line 279, in upload_file",
          "    future.result()"),
         "storage_io", "learned-guess:storage_io",
         journal=TELL,
         mail=("storage_io (learned-guess:storage_io)", "a guess, not a finding",
               "only a weak rule matched: py-traceback")),
    Case("ssd-storage-eio",
         "Llama 3 Table 5 'SSD' (0.7 %): torch.save's PytorchStreamWriter error and the OSError EIO of the "
         "checkpoint write",
         (STEP, "Traceback (most recent call last):", '  File "/home/user/train.py", line 298, in save_checkpoint',
          "    torch.save(state, path)",
          "RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/31: file write failed",
          "OSError: [Errno 5] Input/output error: '/local_nvme/ckpt/step_1200.pt'"),
         "storage_io", "io-error",
         requeued=True, excluded=(),
         journal=("requeue job done", *TELL),
         mail=("storage_io (io-error)", "Input/output error", "requeue {job}: done")),
    Case("time-limit",
         "Slurm: a real TIMEOUT (--time=2) and slurmstepd's '*** JOB ... CANCELLED ... DUE TO TIME LIMIT ***'",
         (), "time_limit", "slurm-time-limit", real_timeout=True,
         requeued=True, excluded=(), time_limit="00:03:00",
         journal=("requeue job done", "notify_user user done"),
         mail=("time_limit", "requeue {job}: done", "time limit 3 min")),
]


TIME_LIMIT = next(c for c in CASES if c.real_timeout)
assert CASES[-1] is TIME_LIMIT, "the time-limit row runs last: its job times out while the others run"


# --- the job -------------------------------------------------------------------------------------

# The rerun of a requeued job (restart 1) or the resubmitted job (NCCL_DEBUG=INFO) succeeds and
# says where it ran and with what; the first run prints the fault's lines and fails.
JOB_HEAD = """#!/bin/sh
set -- $(scontrol show hostnames "$SLURM_JOB_NODELIST")
N0=$1; N1=${2:-$1}
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ -n "${NCCL_DEBUG:-}" ]; then
  echo "rerun on $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0} NCCL_DEBUG=${NCCL_DEBUG:-unset} NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-unset} TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-unset}"
  exit 0
fi
"""


def _shell_line(line: str) -> str:
    """printf of one log line, `{n0}`/`{n1}` becoming the job's node names."""
    parts = re.split(r"(\{n[01]\})", line)
    word = "".join(f'"${{{p[1:-1].upper()}}}"' if re.fullmatch(r"\{n[01]\}", p) else shlex.quote(p) for p in parts if p)
    return f"printf '%s\\n' {word or shlex.quote('')} >&2"


def job_script(case: Case) -> str:
    if case.real_timeout:
        return JOB_HEAD + 'echo "step 1 | loss 2.9"\nsleep 300\n'
    lines = [JOB_HEAD]
    if case.flight_recorder is not None:  # TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$PWD/nccl_trace_rank_
        lines.append(f"cp {shlex.quote(str(case.flight_recorder))}/nccl_trace_rank_* .")
    lines.append(f"echo {shlex.quote(STEP)}")
    lines += [_shell_line(line) for line in case.job_lines if line != STEP]
    lines.append("exit 1")
    return "\n".join(lines) + "\n"


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evidence_dir():
    """World-readable: the dev cluster's SSH user reads the per-node files (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="pitstop-fault-matrix-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def timed_out_job(slurm_cluster, evidence_dir):  # noqa: F811
    """Submitted when the module starts so that its 2-minute limit runs out while the other rows
    run; the time-limit row comes last."""
    work = evidence_dir / f"work-{TIME_LIMIT.id}"
    work.mkdir(mode=0o777)
    job_id = slurm_cluster.submit("-J", "pitstop-fm-time-limit", "-N1", "--time=2", f"--chdir={work}",
                                  "-o", str(work / "fm-%j.out"), script=job_script(TIME_LIMIT))
    yield job_id
    slurm_cluster.cancel(job_id)


@pytest.fixture
def matrix_env(slurm_cluster, sshd, mailbox, use_policy, monkeypatch, evidence_dir, timed_out_job):  # noqa: F811
    use_policy(approval_required=[], **SMALL_CLUSTER_LIMITS)  # approvals have their own tests
    act_on_dev_cluster(monkeypatch, slurm_cluster, sshd)
    monkeypatch.setenv("PITSTOP_PIPELINE__KERNEL_LOG_ARGV", json.dumps(["cat", f"{evidence_dir}/kernel-{{node}}.log"]))
    monkeypatch.setenv("PITSTOP_PIPELINE__NODE_CHECK_ARGV", json.dumps(["cat", f"{evidence_dir}/nodecheck-{{node}}.json"]))
    monkeypatch.setenv("PITSTOP_PIPELINE__NODE_CHECK_TIMEOUT_S", "15")
    user_url = mailbox.url.replace("to=ops@localhost", "to={user}@localhost")
    monkeypatch.setenv("PITSTOP_PIPELINE__USER_NOTIFY_URL", user_url)
    return slurm_cluster


def _write_public(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)


def _record_node_evidence(case: Case, evidence_dir: Path, all_nodes: list[str], job_nodes: list[str]) -> None:
    """What each node's `dmesg` and `pitstop node-check --json` say for this case."""
    for node in all_nodes:
        index = job_nodes.index(node) if node in job_nodes else None
        kernel = case.kernel.get(index, CLEAN_KERNEL) if index is not None else CLEAN_KERNEL
        _write_public(evidence_dir / f"kernel-{node}.log", "\n".join(kernel) + "\n")
        _write_public(evidence_dir / f"nodecheck-{node}.json", _check(node, case.failing.get(index)))


def _expand(slurm, hostlist: str) -> list[str]:
    return slurm.slurm("scontrol", "show", "hostnames", hostlist).split() if hostlist else []


def _put_back(slurm, nodes: list[str]) -> None:
    """The case's nodes back in service: only what Pitstop did (its reason), never a human's drain."""
    for node in nodes:
        if not _scontrol_field(slurm, "node", node, "Reason").startswith("pitstop:"):
            continue
        slurm.slurm("scontrol", "cancel_reboot", node, check=False)  # refused once ISSUED (22.05)
        slurm.slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)  # clears ISSUED too


def _resubmission(slurm, job_id: str) -> str | None:
    out = slurm.slurm("squeue", "--noheader", "--states=all", "--format=%i|%k")
    for line in out.splitlines():
        jid, _, comment = line.partition("|")
        if re.fullmatch(rf"pitstop incident=\d+ resubmit-of={job_id}( \| .*)?", comment.strip()):
            return jid.strip()
    return None


def _journal(job_id: str, user: str, job_nodes: list[str]) -> list[str]:
    names = {n: f"n{i}" for i, n in enumerate(job_nodes)}
    labels = {job_id: "job", user: "user", "ops": "ops", "-": "-"}
    out = []
    for a in sorted(rows(ActionRecord), key=lambda a: (a.incident_id, a.seq)):
        out.append(f"{a.kind} {names.get(a.target) or labels.get(a.target, a.target)} {a.state}")
    return out


def _journal_matches(journal: list[str], expected: tuple[str, ...]) -> bool:
    """Row by row; an expected state `*` accepts any state."""
    def same(got: str, want: str) -> bool:
        g, w = got.rsplit(" ", 1), want.rsplit(" ", 1)
        return g[0] == w[0] and w[1] in {"*", g[1]}

    return len(journal) == len(expected) and all(same(g, w) for g, w in zip(journal, expected))


def _reboot_left_pending(slurm, case: Case, job_nodes: list[str], incident_id: int) -> list[str]:
    """Nodes the row leaves out of service that Slurm will put back itself after their reboot."""
    found = []
    for i in case.drained:
        node = job_nodes[i]
        state = _scontrol_field(slurm, "node", node, "State")
        # (a REBOOT flag alone is expected here: the dev cluster's RebootProgram never completes one)
        if _scontrol_field(slurm, "node", node, "NextState") == "RESUME" or "DRAIN" not in state:
            ticket = " with an RMA ticket" if i in case.tickets else ""
            found.append(BUG_REBOOT_RESUMES.format(node=node, incident=incident_id, ticket=ticket, state=state))
    return found


def _mails(mailbox, to: str) -> list[tuple[str, str]]:
    return [(str(m["subject"]), mailbox.body(i)) for i, m in enumerate(mailbox.messages) if to in str(m["to"])]


# --- the test ------------------------------------------------------------------------------------


def _param(case: Case):
    marks = ON_THE_CLUSTER + [pytest.mark.xfail(strict=True, reason="; ".join(f"{b}: {BUGS[b]}" for b in case.bugs))] if case.bugs else ON_THE_CLUSTER
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_fault_matrix_row(case: Case, prefect_server, matrix_env, mailbox, evidence_dir, timed_out_job):
    from flows.post_failure import post_failure

    slurm = matrix_env
    started = time.monotonic()
    work = evidence_dir / f"work-{case.id}"
    work.mkdir(mode=0o777, exist_ok=True)
    if case.real_timeout:
        job_id = timed_out_job
    else:
        job_id = slurm.submit("-J", f"pitstop-fm-{case.id}"[:60], f"-N{case.nodes}", f"--chdir={work}",
                              "-o", str(work / "fm-%j.out"), script=job_script(case))
    touched: list[str] = []
    jobs = [job_id]
    try:
        final = slurm.wait_state(job_id, "FAILED", "COMPLETED", "TIMEOUT", timeout_s=180 if case.real_timeout else 60)
        assert final == ("TIMEOUT" if case.real_timeout else "FAILED"), (final, (work / f"fm-{job_id}.out").read_text())
        job_nodes = _expand(slurm, _scontrol_field(slurm, "job", job_id, "NodeList"))
        assert len(job_nodes) == case.nodes, job_nodes
        touched = list(job_nodes)
        user = _scontrol_field(slurm, "job", job_id, "UserId").split("(", 1)[0]
        _record_node_evidence(case, evidence_dir, slurm.nodes, job_nodes)
        end = _scontrol_field(slurm, "job", job_id, "EndTime")
        # what the epilog's event carries (EpilogSlurmctld reports a TIMEOUT as exit 0:0)
        facts = {"job_id": job_id, "state": final, "exit_code": 0 if final == "TIMEOUT" else 1,
                 "end_time": datetime.fromisoformat(end).replace(tzinfo=timezone.utc).isoformat()}

        report = post_failure(job_id, facts=facts)

        names = {"n0": job_nodes[0], "n1": job_nodes[-1], "job": job_id}
        fill = lambda text: text.format(**names)  # noqa: E731
        why = "\n".join(report.explain)
        # -- the verdict the incident records
        assert report.status == "done", report
        [incident] = rows(Incident)
        assert (incident.job_id, incident.cause, incident.signature, incident.status) == (
            job_id, case.cause, case.signature, "done"), why

        # -- Slurm, read back with scontrol
        for i, node in enumerate(job_nodes):
            state = _scontrol_field(slurm, "node", node, "State")
            reason = _scontrol_field(slurm, "node", node, "Reason")
            if i in case.drained:
                assert "DRAIN" in state, (node, state, why)
                assert reason.startswith(f"pitstop: {case.cause} {case.signature} incident={incident.id}"), (node, reason)
            else:
                assert not {"DRAIN", "DOWN", "REBOOT"} & set(state.split("+")), (node, state, reason, why)
        assert _scontrol_field(slurm, "job", job_id, "Restarts") == ("1" if case.requeued else "0"), why
        job_state = _scontrol_field(slurm, "job", job_id, "JobState")
        if case.requeued:  # released: waiting for its next start, or already running it
            assert job_state in {"PENDING", "RUNNING", "COMPLETING", "COMPLETED"}, job_state
            assert "Held" not in _scontrol_field(slurm, "job", job_id, "Reason")
        else:
            assert job_state == final, job_state  # not requeued (a resubmission replaces it)
        next_job = job_id
        if case.resubmitted_env:
            new_id = _resubmission(slurm, job_id)
            assert new_id is not None, f"no job tagged resubmit-of={job_id}: {why}"
            jobs.append(new_id)
            next_job = new_id
            assert f"as {new_id}" in why or any(new_id in line.detail for line in report.actions)
        excluded = _expand(slurm, _scontrol_field(slurm, "job", next_job, "ExcNodeList").replace("(null)", ""))
        assert sorted(excluded) == sorted(job_nodes[i] for i in case.excluded), (excluded, why)
        if case.time_limit:
            assert _scontrol_field(slurm, "job", next_job, "TimeLimit") == case.time_limit
        if case.resubmitted_env:  # the new job runs its own script with the variables, elsewhere
            slurm.wait_state(next_job, "COMPLETED", timeout_s=60)
            out = (work / f"fm-{next_job}.out").read_text()
            for key, value in case.resubmitted_env.items():
                assert f"{key}={value}" in out, out
            assert not set(_expand(slurm, _scontrol_field(slurm, "job", next_job, "NodeList"))) & set(excluded)
        if case.wait_rerun:  # the requeued job itself runs again, elsewhere, and succeeds
            slurm.wait_state(job_id, "COMPLETED", timeout_s=60)
            assert _scontrol_field(slurm, "job", job_id, "NodeList") not in excluded
            assert "restart=1" in (work / f"fm-{job_id}.out").read_text()

        # -- the journal
        journal = _journal(job_id, user, job_nodes)
        assert _journal_matches(journal, case.journal), "\n".join(["got:", *journal, "wanted:", *case.journal, "", why])
        tickets = {t.node: t for t in rows(Ticket)}
        assert sorted(tickets) == sorted(job_nodes[i] for i in case.tickets), sorted(tickets)
        for i in case.tickets:  # what the vendor needs, read from that node's own kernel lines
            if GPU_IDENTITY[0] in case.kernel.get(i, ()):
                ticket = tickets[job_nodes[i]]
                assert (ticket.gpu_uuid, ticket.pci_bus) == ("GPU-5b3b2d0f-0e59-8d4c-1a5c-6b3e2f1a9c7d", "0000:3b:00"), ticket
                assert [x["xid"] for x in ticket.xid_history] == [int(case.signature.split("-")[1])], ticket.xid_history

        # -- the mail
        ops = wait_for(lambda: [m for m in _mails(mailbox, "ops@localhost") if not m[0].startswith("[pitstop RMA]")],
                       20, "the ops mail")
        [(subject, body)] = ops
        assert f"job {job_id}" in subject and case.signature in subject, subject
        for text in case.mail:
            assert fill(text) in body, f"{fill(text)!r} not in the ops mail:\n{body}"
        if any(line.startswith("notify_user") for line in case.journal):
            user_mail = wait_for(lambda: _mails(mailbox, f"{user}@localhost"), 20, "the user's mail")
            assert [case.signature in s for s, _ in user_mail] == [True], user_mail
        rma = [s for s, _ in _mails(mailbox, "ops@localhost") if s.startswith("[pitstop RMA]")]
        # the subject ends with the ticket's idempotency key (tasks/tickets.py)
        assert [re.sub(r" \[pitstop-rma-[0-9a-f]+\]$", "", s) for s in rma] == [
            f"[pitstop RMA] {job_nodes[i]}: {case.signature}" for i in case.tickets], rma

        # -- last: what Slurm will do to the nodes left out once their reboot completes
        pending = _reboot_left_pending(slurm, case, job_nodes, incident.id)
        if pending:
            pytest.xfail("; ".join(pending))
    finally:
        for extra in jobs[1:]:
            slurm.cancel(extra)
        slurm.cancel(job_id)
        _put_back(slurm, touched)
        # shown with a failure (or with -s): what happened, for the person reading it
        print(f"{case.id}: {time.monotonic() - started:.1f} s; nodes {touched}; journal:")
        for a in sorted(rows(ActionRecord), key=lambda a: a.seq):
            print(f"  {a.seq:2} {a.kind} {a.target} {a.state}: {(a.result or '')[:160]}")


# --- the verdict behind the Xid rows, without the cluster ---------------------------------------


@pytest.mark.parametrize("xid, message", [(94, "Contained: SM (0x1). RST: No, D-RST: No"),
                                          (95, "Uncontained: SM (0x1). RST: Yes, D-RST: No")], ids=["xid94", "xid95"])
def test_cuda_ecc_error_of_an_xid_94_or_95_job_keeps_the_xid_bucket(xid, message):
    """Every process on a GPU with a contained (94) or uncontained (95) ECC error sees CUDA's
    cudaErrorECCUncorrectable ('uncorrectable ECC error encountered'): that is how the job dies.
    The kernel's Xid says what NVIDIA wants done (RESTART_APP, RESET_GPU); the CUDA text only
    says that it happened."""
    from classifiers import classify_text
    from pitstop.models import SchedulerFacts

    verdict = classify_text(f"{STEP}\n{CUDA_ECC}\n", SchedulerFacts(state="FAILED", exit_code=1),
                            kernel_text=_xid("0000:86:00", xid, message) + "\n")
    assert verdict.signature == f"xid-{xid}", verdict
