"""The demo cluster's fault table: the Llama 3 405B interruption mix, as data.

Shares come from the Llama 3 paper's table of 419 unexpected interruptions over 54 days (GPU
30.1 %, GPU HBM3 17.2 %, software bug 12.9 %, network switch/cable 8.4 %, host maintenance 7.6 %,
GPU SRAM 4.5 %, GPU system processor 4.1 %, NIC 1.7 %, NCCL watchdog 1.7 %, ...). Each fault
says what the job log and the kernel log show (real-format lines) and what the node looks like
afterwards, so the whole pipeline, not just the demo, sees realistic input.

Placeholders: {job}, {node}, {rank}, {pci}, {pid}, {ts} (kernel uptime seconds), {peer}.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class FaultKind(BaseModel):
    name: str
    share: float = Field(gt=0, description="weight in the mix (percent of interruptions)")
    job_state: str = "FAILED"
    exit_code: int = 1
    signal: int | None = None
    log_lines: list[str]
    kernel_lines: list[str] = Field(default_factory=list)
    node_health: str = Field(
        default="ok", description="ok | gpu_fail (sticky) | transient (a reboot clears it) | down"
    )


FAULTS: tuple[FaultKind, ...] = (
    FaultKind(
        name="gpu_fell_off_bus",
        share=30.1,
        log_lines=[
            "[rank{rank}]: RuntimeError: CUDA error: unspecified launch failure",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
        ],
        kernel_lines=[
            "NVRM: GPU at PCI:{pci}: GPU-3f1c9a52-7d0e-4b8a-9c61-2a5be0f4d7c3",
            "NVRM: Xid (PCI:{pci}): 79, pid={pid}, name=python, GPU has fallen off the bus.",
            "NVRM: GPU {pci}: GPU has fallen off the bus.",
        ],
        node_health="gpu_fail",
    ),
    FaultKind(
        name="hbm3_double_bit_error",
        share=17.2,
        log_lines=[
            "[rank{rank}]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        ],
        kernel_lines=[
            "NVRM: Xid (PCI:{pci}): 48, pid={pid}, name=python, Ch 00000010, An uncorrectable "
            "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
            "subpartition 0.",
            "NVRM: Xid (PCI:{pci}): 63, pid={pid}, name=python, Row Remapper: New row marked "
            "for remapping, reset gpu to activate.",
        ],
        node_health="transient",
    ),
    FaultKind(
        name="software_bug",
        share=12.9,
        exit_code=1,
        log_lines=[
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 412, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 377, in main',
            "    batch = next(loader_iter)",
            "IndexError: list index out of range",
        ],
    ),
    FaultKind(
        name="network_fabric",
        share=8.4 + 1.7,  # switch/cable + NIC
        log_lines=[
            "{node}:{pid}:{pid} [{rank}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
            "completion from peer {peer}<43210> with error 12, opcode 0, len 0, vendor err 129 "
            "(Recv) localGid ::ffff:10.0.0.1 remoteGid ::ffff:{peer}",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.20.5",
        ],
        kernel_lines=["mlx5_core 0000:{pci}: mlx5_port_module_event: Port 1 link down"],
    ),
    FaultKind(
        name="host_maintenance",
        share=7.6,
        job_state="NODE_FAIL",
        exit_code=0,
        log_lines=[
            "slurmstepd: error: *** JOB {job} ON {node} CANCELLED AT 2025-01-01T00:00:00 DUE TO "
            "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        ],
        node_health="down",
    ),
    FaultKind(
        name="gpu_sram_uncontained",
        share=4.5,
        log_lines=["[rank{rank}]: RuntimeError: CUDA error: an illegal memory access was encountered"],
        kernel_lines=[
            "NVRM: Xid (PCI:{pci}): 95, pid={pid}, name=python, Uncontained: SM ECC error, "
            "GPU reset required.",
        ],
        node_health="transient",
    ),
    FaultKind(
        name="gpu_system_processor",
        share=4.1,
        log_lines=["[rank{rank}]: RuntimeError: CUDA error: unknown error"],
        kernel_lines=[
            "NVRM: Xid (PCI:{pci}): 119, pid={pid}, name=python, Timeout after 6s of waiting for "
            "RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
        ],
        node_health="gpu_fail",
    ),
    FaultKind(
        name="nccl_watchdog",
        share=1.7,
        exit_code=134,
        signal=6,
        log_lines=[
            "[rank{rank}]:[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=88211, OpType=ALLREDUCE, NumelIn=262144, "
            "NumelOut=262144, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
        ],
    ),
    FaultKind(
        name="ssd_io_error",
        share=1.0,
        log_lines=[
            "OSError: [Errno 5] Input/output error: '/scratch/ckpt/step_88000/rank{rank}.pt'",
        ],
        kernel_lines=["blk_update_request: I/O error, dev nvme0n1, sector 123456 op 0x1:(WRITE)"],
    ),
    FaultKind(
        name="cuda_oom",
        share=1.0,
        log_lines=[
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
            "total capacity of 79.10 GiB of which 1.06 GiB is free.",
        ],
    ),
    FaultKind(
        name="time_limit",
        share=1.0,
        job_state="TIMEOUT",
        exit_code=0,
        log_lines=[
            "slurmstepd: error: *** JOB {job} ON {node} CANCELLED AT 2025-01-01T00:00:00 DUE TO "
            "TIME LIMIT ***",
        ],
    ),
)

FAULTS_BY_NAME: dict[str, FaultKind] = {fault.name: fault for fault in FAULTS}

# A few healthy lines every demo job prints before it fails.
PREAMBLE = [
    "[rank{rank}]: using NCCL 2.20.5, world size 64",
    "step 87990 | loss 1.8421 | lr 2.8e-05 | tokens/s 412k",
    "step 88000 | loss 1.8398 | lr 2.8e-05 | tokens/s 411k",
]
