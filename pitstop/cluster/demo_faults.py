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


# --- silent slowdowns: faults that fail no check and crash nothing --------------------------
# What the demo's node-check reports for each GPU: an HGX H100 SXM5 80GB under load, as
# `nvidia-smi -q` shows one (max SM clock 1980 MHz, power limit 700 W, PCIe Gen5 x16), with a
# little per-GPU jitter so the fleet's spread is not zero.

DEMO_DRIVER = "550.54.15"
DEMO_CUDA = "12.4"
GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # HGX H100 board bus numbers
NIC_BUSES = ("1a", "9c")  # ConnectX-7 beside the first and fifth GPU's switch


class Slowdown(BaseModel):
    name: str
    description: str
    gpu: dict = Field(default_factory=dict, description="GpuHealth fields as NVML reports them then")
    link_width: int | None = Field(default=None, description="sysfs current_link_width of the GPU")


SLOWDOWNS: tuple[Slowdown, ...] = (
    Slowdown(
        name="pcie_x8",
        description="the GPU trained its PCIe link at x8 in an x16 slot (a riser or a card that needs reseating)",
        gpu={"pcie_link_width": 8},
        link_width=8,
    ),
    Slowdown(
        # HW thermal slowdown: NVML clocksEventReasonHwThermalSlowdown; H100 SXM slows down near
        # 87-90 C (nvidia-smi -q "GPU Slowdown Temp"), at roughly two thirds of its clocks
        name="thermal_throttle",
        description="the GPU runs hot and the hardware holds its clocks down (a failing fan or blocked airflow)",
        gpu={"clock_event_reasons": ["hw_thermal_slowdown"], "sm_clock_mhz": 1245, "temperature_c": 89,
             "power_w": 431.5},
    ),
)
SLOWDOWNS_BY_NAME: dict[str, Slowdown] = {s.name: s for s in SLOWDOWNS}


def demo_gpu_fields(node: str, index: int, slowdown: str | None) -> dict:
    """One busy GPU's NVML fields (pitstop.node.nvml.GpuHealth), reproducible per node and index."""
    import random

    rng = random.Random(f"{node}:{index}")
    fields = {
        "index": index,
        "uuid": f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-"
                f"a{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}",
        "serial": f"1654523{rng.randint(0, 999_999):06d}",
        "pci_bus_id": f"00000000:{GPU_BUSES[index].upper()}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "temperature_c": rng.randint(58, 66),
        "power_w": round(rng.uniform(610.0, 665.0), 1),
        "power_limit_w": 700.0,
        "sm_clock_mhz": rng.choice((1965, 1980, 1980, 1980)),
        "max_sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "pcie_link_width": 16, "pcie_link_width_max": 16, "pcie_link_gen": 5, "pcie_link_gen_max": 5,
        "clock_event_reasons": [],
        "ecc_volatile_sbe": 0, "ecc_volatile_dbe": 0, "ecc_aggregate_sbe": rng.randint(0, 3), "ecc_aggregate_dbe": 0,
        "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pages_pending": False,
        "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0, "remap_pending": False,
        "remap_failure": False,
        "nvlinks": [{"link": link, "active": True, "replay_errors": 0, "recovery_errors": 0,
                     "crc_flit_errors": 0, "crc_data_errors": 0} for link in range(18)],
    }
    if slowdown is not None:
        fields.update(SLOWDOWNS_BY_NAME[slowdown].gpu)
    return fields


def demo_pcie_links(slowdowns: dict[int, str]) -> list[dict]:
    """The sysfs links (pitstop.node.pcie.PcieLink) of the demo node's 8 GPUs and 2 NICs."""
    links = []
    for index, bus in enumerate(GPU_BUSES):
        slow = SLOWDOWNS_BY_NAME[slowdowns[index]] if index in slowdowns else None
        width = slow.link_width if slow is not None and slow.link_width is not None else 16
        links.append({"address": f"0000:{bus}:00.0", "kind": "gpu", "vendor": "0x10de", "device": "0x2330",
                      "width": width, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0,
                      "upstream_max_width": 16, "upstream_max_speed_gts": 32.0})
    for bus in NIC_BUSES:
        links.append({"address": f"0000:{bus}:00.0", "kind": "nic", "vendor": "0x15b3", "device": "0x1021",
                      "width": 16, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0,
                      "upstream_max_width": 16, "upstream_max_speed_gts": 32.0})
    return links
