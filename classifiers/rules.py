"""The rule table: which log line names which root cause, and how strongly.

Ordered data, one row per signature. `priority` encodes root-cause precedence (higher wins):
hardware beats the NCCL timeout it causes, an OOM beats the traceback that echoes it, a NaN beats
the time-limit kill that follows it, and a specific exception beats a bare traceback.

Priority bands (keep new rows inside their band):
  100-95 gpu_hardware / gpu_memory      90 node_failure          85 host_oom
   86    network_fabric                 80 cuda_oom              75 storage_io
   72    environment                    70 numerical             60 nccl_timeout
   56    time_limit   55 preempted (Slurm's words)   53 time-limit warning signal   52-45 requeue,
         a launcher's "preempted", cancel   45 software_bug (specific)
   40    crash_signal (explicit)        30 generic exception     20 weak signals   5 success
Deliberate exceptions: 91 a node's death that names a preemption beats the node failure it
explains; 86 NCCL's /dev/shm set-up (environment) beats the DataLoader shm row (host_oom, 80) and
the NCCL socket row (85) that shares its "failed :" wording, and 87 the same segment failing for a
full /dev/shm (host_oom) beats both; 81 a GPU allocator's own failure
(`cuMemAlloc failed: out of memory`) beats the Python MemoryError that wraps it (host_oom, 80);
81 TensorFlow's ResourceExhaustedError naming a disk quota beats the GPU OOM row (80) of that name;
41 an uncaught C++ exception (`terminate called after throwing`) beats the SIGABRT it causes (40),
and 42 a CUDA error beats both (the exception that wraps it, the signal that follows it), so its
Xid alternative stays on the verdict.
97 a GPU in a confidential-computing mode the host does not support (environment) beats the
RmInitAdapter failure (96) it causes.
87 a peer reached at Docker's bridge address (environment) beats the fabric and c10d-store rows
(83-86) that read the same refused connection as the network's fault.
100 a host DIMM's uncorrectable error as the BMC or BIOS words it (node_failure) beats the GPU's
uncorrectable-ECC row (99) whose words it shares.
88 the kernel's or Slurm's OOM kill beats the fabric errors (86-87) that the killed rank's peers then
report (an RDMA queue pair whose remote process died ends in a transport-retry error).
76 a kernel module that cannot load (environment) beats the `LustreError:` line (74) reporting it.
62 HCCL's collective-argument mismatch (software_bug) beats the HCCL timeout (60) it causes.
A job STEP cancelled sits at 34, below the crash signals and CUDA/HIP errors (40+) that make srun
cancel a step and above the kill that follows a cancel (sigkill 33); CUDA's devices-unavailable
(gpu_hardware) at 90 with the NVSwitch fabric row: the node's GPU state, not a hardware fault the
driver reported.
A row flagged `ends_run` (MLPerf's run_stop success) demotes what fails after it in the same log to
3, below success, unless it names hardware, memory or a numerical fault (decide.SHUTDOWN_NOISE).
A row flagged `routine` (fp16 overflow skips, numpy's warnings: healthy runs print them) ranks
below a success line after it in the same log; the row flagged `consequence` (the bare step cancel)
ranks below an earlier failing line of the same log (priority 28 up), since srun cancels the step
once a task failed (decide.routine_before_success, decide.consequence_of_failure).
Two environment rows sit outside their band on purpose: sigill at crash-signal priority (40), so
any named cause printed with it wins, and user-lookup-failed at 4, since a container's unnamed uid
prints it in good runs too.

Adding a cause or signature: add one row here and one case in tests/classifiers/cases.py.
"""

from __future__ import annotations

from pitstop.models import Cause

from pitstop.node.xid import RECOVERY_ACTION_STATUS
from pitstop.models import CheckStatus

from classifiers.rule_model import Rule
from classifiers.signal_meaning import SIGNALS
from classifiers.xid_rules import XID_PREFIX, xid_pattern, xid_rules

G, M, NC, NF = Cause.GPU_HARDWARE, Cause.GPU_MEMORY, Cause.NCCL_TIMEOUT, Cause.NETWORK_FABRIC
CO, HO, NU, SW = Cause.CUDA_OOM, Cause.HOST_OOM, Cause.NUMERICAL, Cause.SOFTWARE_BUG
EN, IO, TL, PR = Cause.ENVIRONMENT, Cause.STORAGE_IO, Cause.TIME_LIMIT, Cause.PREEMPTED
NO, CS, OK = Cause.NODE_FAILURE, Cause.CRASH_SIGNAL, Cause.SUCCESS

XID = XID_PREFIX
# Xid 154 names the recovery the driver wants; the ones the node check treats as FAIL are root causes.
RECOVERY_FAIL = sorted(a for a, status in RECOVERY_ACTION_STATUS.items() if status is CheckStatus.FAIL)

DRAIN = "drain the node and open a hardware ticket; requeue the job elsewhere"
RESET = "drain the node, reset the GPU (or reboot); if it recurs, RMA the GPU"
FABRIC = "check the node's IB/RoCE links and switch port (ibstat, counters); requeue elsewhere"
USER = "user bug: send the job owner the evidence; do not requeue unchanged"
MORE_TIME = "request more time or checkpoint more often"


def _r(signature: str, cause: Cause, priority: int, pattern: str, hint: str, **kw) -> Rule:
    return Rule.built_in(signature=signature, cause=cause, priority=priority, pattern=pattern, hint=hint, **kw)


RULES: tuple[Rule, ...] = (
    # --- GPU hardware / memory: Xid lines come from the one catalog (pitstop.node.xid) -------
    *xid_rules(),
    _r("xid-154-recovery", G, 97, XID + r"154\b[^\n]{0,160}to 0x[0-9a-f]+ \((" + "|".join(RECOVERY_FAIL) + r")\)",
       "the driver asks for a GPU reset / node reboot (Xid 154): " + DRAIN),
    _r("gpu-fallen-off-bus", G, 100, r"fallen off the bus", "GPU fell off the bus: " + DRAIN),
    _r("gpu-lost", G, 99, r"GPU is lost|GPU has been lost|lost the GPU|GPU_IS_LOST", "GPU is lost: " + DRAIN),
    _r("nvlink-uncorrectable", G, 97, r"uncorrectable NVLink error", "NVLink error: " + RESET),
    # CUDA's error for a fault the GPU contained (CUDA Runtime API, cudaErrorContained: "an invalid
    # access of peer GPU memory over nvlink or a hardware error"): the process must exit; the Xid the
    # driver logged with it (94, 74, ...) decides the bucket when it is in the evidence.
    _r("cuda-error-contained", G, 95, r"CUDA_ERROR_CONTAINED|cudaErrorContained|over nvlink or a hardware error",
       "the GPU contained a hardware fault (NVLink or memory): restart the job elsewhere and check the node's Xids",
       confidence=0.7, defers_to_xid=True),
    # NCCL's NVLS set-up failing on a node's NVSwitch fabric: NCCL itself names Fabric Manager or the
    # NVSwitches; the node's GPUs need a reset (or the node a reboot) with Fabric Manager running.
    _r("nvswitch-fabric-error", G, 90, r"Failed to bind NVLink SHARP \(NVLS\)|error in the Fabric Manager or NVSwitches|fabric manager[^\n]{0,80}(failed|error|not running)|NVSwitch[^\n]{0,80}(fatal|error|failure)",
       "the node's NVSwitch fabric / Fabric Manager is in a bad state: drain, restart nvidia-fabricmanager and reset the GPUs (or reboot); requeue elsewhere"),
    # cudaErrorDevicesUnavailable (46): "all CUDA devices are busy or unavailable" (CUDA Runtime
    # API): a process left on the node holds a GPU in exclusive mode, or the GPU is wedged. The
    # node's state, not the job's: drain, reset (the reset clears stale contexts), check.
    _r("cuda-devices-unavailable", G, 90, r"cudaErrorDevicesUnavailable|CUDA-capable device\(s\) is/are busy or unavailable|CUDA_ERROR_DEVICE_UNAVAILABLE",
       "a GPU on this node is busy or unavailable (a stale process in exclusive mode, or a wedged GPU): " + RESET,
       confidence=0.6),
    _r("gpu-reset-required", G, 96, r"GPU Reset Required|GPU requires reset|reset the GPU|NV_ERR_RESET_REQUIRED",
       "GPU needs a reset: " + RESET),
    _r("gpu-device-handle", G, 96, r"Unable to determine the device handle for GPU",
       "nvidia-smi cannot reach the GPU: " + DRAIN),
    _r("rm-init-adapter-failed", G, 96, r"RmInitAdapter failed", "GPU failed to initialise: " + DRAIN),
    _r("gpu-gsp-timeout", G, 95, r"Timeout waiting for RPC from GSP|GSP RPC timeout|kgspRc",
       "GSP firmware timeout: " + RESET),
    # ROCm's runtime (ROCr) reports the GPU's own exception to the process: a hang or a hardware
    # fault it could not recover. Code can hang a GPU too, so it is named with less confidence.
    _r("rocm-gpu-hw-exception", G, 95, r"HW Exception by GPU node-[0-9]+[^\n]{0,80}reason ?: ?(GPU Hang|[A-Za-z ]*Hardware)",
       "the GPU raised a hardware exception (ROCm reports a GPU hang): reset the GPU and check it; the same hang on "
       "other nodes would be the code", confidence=0.6),
    _r("amdgpu-hardware-error", G, 95,
       r"amdgpu [^\n]{0,80}(uncorrectable hardware error|\[Hardware Error\]|GPU reset begin|ring [a-z0-9_.]+ timeout)",
       "AMD GPU hardware error (RAS/ACA event or ring timeout): " + DRAIN),
    # amdgpu unable to run the card's VBIOS at boot ("atombios stuck", "gpu post error"): the card
    # itself (AMD support in ROCm/legacy-rocm-build#1320). A bare "Fatal error during GPU init" is
    # not enough: a host BIOS without Above 4G decoding / Resizable BAR prints it too.
    _r("amdgpu-init-failed", G, 96, r"amdgpu [^\n]{0,40}gpu post error|atombios stuck (in loop|executing)",
       "the AMD GPU failed to initialise (VBIOS/POST): " + DRAIN, confidence=0.8),
    _r("pcie-bus-error-uncorrected", G, 87, r"PCIe Bus Error: severity=(Uncorrected|Fatal)",
       "PCIe link error: " + DRAIN, confidence=0.75),
    # An Xid missing from the catalog: weaker than any catalogued one, stronger than success.
    # At most five digits (NVIDIA's are three): a corrupt line's 200-digit run is no Xid.
    _r("xid-{1}", G, 25, xid_pattern("[0-9]{1,5}"),
       "other Xid: look it up in the NVIDIA Xid catalog before acting", confidence=0.5),
    # --- GPU memory (HBM/ECC) -------------------------------------------------------------------
    # CUDA's words for what the driver logs as an Xid: a job on a GPU with a contained Xid 94 dies
    # with "uncorrectable ECC error encountered" too. With the Xid in the evidence, NVIDIA's bucket
    # for that Xid decides (94: restart the app; 95: reset the GPU), not this line.
    _r("ecc-uncorrectable", M, 99, r"uncorrectable ECC error|ECC_UNCORRECTABLE|ECCUncorrectable",
       "uncorrectable ECC error: " + RESET, defers_to_xid=True),
    _r("ecc-double-bit", M, 98, r"double[- ]bit (ECC )?error (has been )?detected|uncorrectable double[- ]bit|\(DBE\)", "double-bit ECC error: " + RESET),
    # DCGM's diagnostic test `Page Retirement/Row Remap` failing (dcgmi diag), as a table row or as a
    # result a health agent writes (IBM Autopilot's `ERR_..._page_retirement_row_remap` node label).
    _r("row-remap-failure", M, 98, r"row remap(ping)? fail|remapped rows? (failure|pending)|page retirement fail|Page Retirement/Row Remap[ |]{1,20}(Fail|Error)|ERR[^\n]{0,40}page_retirement_row_remap",
       "row-remapping failure: drain the node; RMA the GPU"),
    # nvidia-smi -q: a non-zero uncorrectable counter or a pending remap (the GPU needs a reset).
    _r("smi-uncorrectable-count", M, 96,
       r"^[ \t]*((DRAM |SRAM )?Uncorrectable( Error)?|Remapping Failure Occurred|Pending)[ \t]*: ([1-9][0-9]*|Yes)\b",
       "nvidia-smi shows uncorrectable memory errors or a pending row remap: " + RESET),
    # --- Node failure ----------------------------------------------------------------------------
    # A cloud-bursting scheduler (Slurm-GCP, ParallelCluster, CycleCloud) whose cloud refused to create
    # the node for an exhausted project quota marks the node DOWN and requeues the job: the quota is the
    # cause and the node is not faulty, so this outranks the node failure it leads to. GCP's
    # `Quota 'CPUS' exceeded. Limit: 24.0 in region` / QUOTA_EXCEEDED (Compute Engine quotas docs),
    # EC2's VcpuLimitExceeded / InstanceLimitExceeded (EC2 API error codes), Azure's QuotaExceeded.
    _r("cloud-quota-exceeded", EN, 92, r"\bQuota '?[A-Z][A-Z0-9_]+'? exceeded|\bQUOTA_EXCEEDED\b|\bVcpuLimitExceeded\b|\bInstanceLimitExceeded\b|\bQuotaExceeded\b|exceeding approved [^\n]{0,60}quota",
       "the cloud refused to create the node: a project/account quota (CPUs, GPUs, instances) is exhausted; "
       "raise the quota or shrink the partition; the node itself is not faulty", caseless=False),
    _r("slurm-node-fail", NO, 90, r"DUE TO NODE FAIL|NODE_FAIL\b|Node failure on|\(node failure\)|update_node: node [^\n ]+ state set to (FAIL|DOWN)\b",
       "the scheduler lost the node: check slurmd/BMC on it; requeue the job"),
    _r("node-marked-dead", NO, 90, r"node[^\n]{0,120}(has been )?marked (as )?dead|node has (beem|been) marked as dead|its node has died|node has crashed",
       "a node left the cluster (heartbeats lost): check the node; requeue"),
    _r("mpi-peer-disconnected", NO, 88, r"MPI communication peer process has unexpectedly disconnected",
       "an MPI peer vanished: look at the peer host's logs; requeue"),
    # Open MPI lost a node's daemon: "processes on that node have been lost". Real threads blame
    # the node (rebooted, died) more often than the TCP link Open MPI names first.
    _r("mpi-lost-daemon", NO, 84, r"(ORTE|PRTE) has lost communication with (a |its )?(remote )?daemon",
       "mpirun lost a node's daemon: check that node is up (it may have rebooted or died), then "
       "the route to it (firewall, oob_tcp_if_include); requeue"),
    _r("node-lost-orchestrator", NO, 88, r"NodeDiedError|the node it was running on (is|was|has) (dead|died)|NodeNotReady|NodeStatusUnknown|Kubelet stopped posting node status|node[^\n]{0,60} (is|became) NotReady|NodeLost|Node [^\n]{0,60}is unreachable|^[^\n \t]+ +NotReady +",
       "the orchestrator lost a node (Ray/Kubernetes): check that node; requeue"),
    # Tenstorrent's tt-smi after a reset: the chip's management core (ARC) never came back, its sensors
    # read all ones: the accelerator is gone as a GPU that fell off the bus is; only a power cycle
    # recovers it, and a card that does it again is for RMA.
    _r("accelerator-reinit-failed", G, 85, r"Error when re-initializing chips!|Chip initialization failed:",
       "the accelerator did not come back after a reset (its management core never answered): drain, power-cycle the host; RMA if it recurs",
       confidence=0.6),
    _r("kernel-panic", NO, 90, r"Kernel panic|kernel BUG at", "the node's kernel crashed: drain and inspect"),
    # The kernel's PCIe Advanced Error Reporting: a FATAL uncorrected error on the path to a GPU
    # (the GPU itself, its riser, PCIe switch or IO board), not the job; corrected ones are noise.
    _r("pcie-aer-fatal", G, 95, r"AER: (Multiple )?Uncorrect(ed|able) \(Fatal\)",
       "fatal PCIe error on the path to a GPU (GPU, riser, switch, IO board): drain, reboot, deep check; RMA if it recurs"),
    # Torque/PBS: pbs_server cannot hand the job to the node's daemon (pbs_mom), `unable to run job,
    # send to MOM '10.1.1.2' failed` / `MOM rejected/timeout` (tracejob): the node is unreachable.
    _r("node-not-responding", NO, 88, r"node[^\n]{0,60} not responding|lost connection to (the )?node|unable to run job, (send to )?MOM[^\n]{0,40}(failed|rejected|timeout)",
       "a node stopped responding: check it; requeue"),
    # Slurm's own node reasons and states (upper case: `sinfo -R`, `scontrol show node`).
    _r("slurm-node-down", NO, 88, r"Node unexpectedly re[a-z]{0,6}\b|\bNot responding\b|\bdown\* |allocated node +[^\n ]+ is in state Down\b",
       "Slurm marked the node down (rebooted or not responding): check the node; requeue", caseless=False),
    # slurm.conf(5), Prolog: a prolog that fails drains the node and requeues the job; PBS/Torque
    # and LSF say the same of their prologue/pre-exec. The node's set-up is at fault, not the job.
    _r("scheduler-prolog-failed", NO, 80, r"PrologSlurmctld failed|Prolog failure on node|prolog (failed|failure|error) on (node|host)|\bprolog(ue)? (failed|failure)\b|PBS: (job killed: )?prolog(ue)? (failed|error)|Pre-exec(ution)? command failed",
       "the scheduler's prolog failed on the node (Slurm drains it): read the node's prolog output, fix the node, resume it"),
    _r("host-machine-check", NO, 87,
       r"mce: \[Hardware Error\]|Machine check events logged|Machine Check Exception|EDAC [^\n]{0,60}(MEMORY ERROR|Uncorrected|UE )",
       "the host reports CPU/DIMM hardware errors (MCE/EDAC): drain the node and check its BMC/SEL"),
    # A host DIMM's uncorrectable error as the BMC's event log (IPMI SEL memory sensor offsets,
    # ipmitool sel elist `Memory #0x.. | Uncorrectable ECC | Asserted`; Supermicro `... @P2-DIMMH2(CPU2)`;
    # Dell iDRAC MEM0001 `Multi-bit memory errors detected`) or the BIOS at POST (`Node0: DRAM
    # uncorrectable ECC Error`) words it: host RAM, not a GPU's. At 100 it beats the GPU row
    # (ecc-uncorrectable, 99) whose "uncorrectable ECC error" these lines also contain.
    _r("host-dimm-ecc", NO, 100,
       r"\| Uncorrectable ECC\b|Uncorrectable (ECC|memory error)[^\n]{0,80}DIMM|Multi-bit memory errors? detected on a memory device|\bDRAM uncorrect(able|ed) ECC",
       "a host memory DIMM has uncorrectable errors (BMC/BIOS): drain the node, replace the DIMM (the BMC's SEL names the slot)"),
    # --- Network fabric (IB/RoCE/sockets under NCCL/gloo) ----------------------------------------
    # Huawei's HCCL (Ascend's NCCL) on RoCE: an error CQE is the RoCE retransmission limit exceeded
    # (CANN HCCL user guide, EI0013), as NCCL's IB completion errors below.
    _r("hccl-roce-error-cqe", NF, 86, r"ROCE CQE\(EI0013\)|An error CQE occurred during operator execution|error cqe status: 0x[0-9a-f]+",
       "RoCE error completion under HCCL (retry limit exceeded, port flapping) or a peer that exited first: " + FABRIC),
    _r("nccl-ib-completion-error", NF, 87, r"NET/IB ?: ?Got completion|Got completion from peer[^\n]{0,80}(status|error)",
       "IB completion error: " + FABRIC),
    # libfabric's completion-queue errors as MPICH/Cray MPICH report them ("OFI poll failed ...
    # UNDELIVERABLE": the fabric could not deliver a message; HPE Slingshot's known failure, OLCF
    # Frontier's known issues). Its errno text ("Input/output error") is not the filesystem's.
    _r("ofi-cq-error", NF, 87, r"OFI poll failed \([^\n]{0,160}(UNDELIVERABLE|Transport retry|Connection timed out)|MPIDI_OFI_handle_cq_error[^\n]{0,120}(UNDELIVERABLE|failed)",
       "the fabric could not deliver an MPI message (libfabric completion error): " + FABRIC),
    # Verbs work-completion errors, also as other MPIs print them (ParaStation MPI: "ibv_poll_cq():
    # Infiniband returned the wrong Opcode").
    _r("ib-wc-error", NF, 87, r"IBV_WC_[A-Z_]*ERR|transport retry count(er)? exceeded|RETRY_EXC_ERR|ibv_poll_cq\(\)?:? [^\n]{0,40}(wrong Opcode|bad status|error)",
       "IB work completion error: " + FABRIC),
    _r("ibv-call-failed", NF, 86, r"\bibv_[a-z_]+ failed|Call to ibv_[a-z_]+ failed",
       "RDMA verbs call failed (link, device or memlock limit): " + FABRIC),
    # The HCA is not there for the IB tools (ibstat/ibstatus find no /sys/class/infiniband ports):
    # the adapter or its driver failed to come up on this node.
    _r("ib-device-missing", NF, 86, r"sys files not found \(/sys/class/infiniband|/sys/class/infiniband[^\n]{0,40}No such file or directory",
       "the node's InfiniBand adapter is not visible (no /sys/class/infiniband ports): check the HCA, its firmware and driver; " + FABRIC,
       confidence=0.6),
    # The port's state as iproute2's `rdma link` prints it: a port DOWN and polling (no link
    # partner, a bad cable) or flapping between states.
    _r("rdma-link-down", NF, 86, r"\blink [A-Za-z0-9_]+/[0-9]+ [^\n]{0,120}\bstate DOWN physical_state (POLLING|DISABLED|LINK_ERROR_RECOVERY|LINK_UP)",
       "an RDMA port is down (rdma link: DOWN/POLLING or flapping): " + FABRIC, confidence=0.8),
    # LBNL's Node Health Check (NHC, run by Slurm's HealthCheckProgram; Azure's HPC images ship it)
    # failing its InfiniBand checks: a port not ACTIVE, or an IB loopback far below its bandwidth.
    _r("nhc-ib-check-failed", NF, 86, r"Health check failed: +check_(hw_ib|nccl_allreduce_ib_loopback)\b|No IB port [^\n]{0,40}is ACTIVE",
       "the node's health check failed its InfiniBand test (port down or bandwidth far below expected): " + FABRIC),
    _r("mlx5-error", NF, 86, r"mlx5[^\n]{0,80}(completion with error|link down|syndrome|fatal)",
       "Mellanox NIC error: " + FABRIC),
    # UCX (Open MPI, HPC-X) and libfabric/EFA (AWS) report the same transport failures in their words.
    _r("ucx-transport-error", NF, 86,
       r"(UD|RC|DC) endpoint [^\n]{0,80}(unhandled timeout|timeout error)|ud_ep\.c:[0-9]+ +Fatal|UCX +ERROR [^\n]{0,200}(Transport retry|Endpoint timeout|Connection reset|Destination is unreachable)",
       "UCX transport failed (endpoint timeout / retries): " + FABRIC),
    _r("efa-libfabric-error", NF, 86,
       r"efa_rdm_[a-z_]*handle_error|Unresponsive receiver \(reachable by EFA device|libfabric:[^\n]{0,60}efa[^\n]{0,60}<warn> err|NET/OFI [^\n]{0,200}(completed with error|UNDELIVERABLE)|fi_cq_readerr",
       "EFA/libfabric completion error: check the EFA devices and security group of both hosts; requeue elsewhere"),
    _r("nccl-ib-warning", NF, 84, r"NCCL WARN NET/IB|NCCL WARN[^\n]{0,80}(ibv_|IB |RoCE|async event)",
       "NCCL reported an InfiniBand/RoCE problem: " + FABRIC),
    _r("nccl-socket-peer-closed", NF, 85, r"(NCCL WARN|socketProgress|ncclSocket|NCCL error)[^\n]{0,160}(Connection (reset|closed|refused|timed out)|closed by remote peer|Broken pipe|failed : |connection abort|No route to host|Network is unreachable|Operation timed out)",
       "NCCL socket transport broke: check the network path between the nodes (NCCL_SOCKET_IFNAME)"),
    _r("nccl-connect-refused", NF, 84, r"NCCL INFO Call to connect returned Connection refused",
       "NCCL cannot connect to a peer: check interface (NCCL_SOCKET_IFNAME) and firewall"),
    _r("gloo-connection-lost", NF, 85, r"gloo[^\n]{0,160}(Connection (reset|closed) by peer|Broken pipe|Connection refused)",
       "gloo TCP transport broke: check connectivity between the nodes"),
    _r("c10d-connection-reset", NF, 84, r"(c10d|distributed|NCCL|process_group|gloo)[^\n]{0,200}(Connection reset by peer|closed by remote peer)|RuntimeError: Connection reset by peer|Connection closed by remote peer",
       "distributed connection reset: check the network between nodes"),
    _r("c10d-store-unreachable", NF, 83, r"client socket has timed out after[^\n]{0,40}while trying to connect|connection to the C10d store has failed|RendezvousConnectionError",
       "cannot reach the rendezvous endpoint: check host/port reachability and firewall"),
    _r("nccl-remote-error", NF, 62, r"ncclRemoteError|remote process exiting prematurely|remote process exited or there was a network error",
       "a remote rank or the network failed: look at the other ranks' logs first", confidence=0.6),
    _r("nccl-system-error", NF, 61, r"ncclSystemError|unhandled system error",
       "NCCL system error (sockets, IB or shm): run with NCCL_DEBUG=INFO", confidence=0.6),
    _r("nccl-internal-error", NF, 44, r"ncclInternalError|NCCL error[^\n]{0,120}internal error",
       "NCCL internal error (often IB/NVLink/shm setup): rerun with NCCL_DEBUG=INFO on the failing node",
       confidence=0.5),
    _r("rpc-os-error", NF, 58, r"\bOS Error\b|UNAVAILABLE: (Socket closed|Connection reset)",
       "RPC transport error between workers: check the network", confidence=0.6),
    _r("nccl-no-interface", EN, 72, r"no socket interface found|Bootstrap : no socket interface|NCCL_SOCKET_IFNAME[^\n]{0,80}(no interface|not found)|is neither AF_INET\(2\) nor AF_INET6|No usable listening interface found|NET/Socket : No interface found|Socket creation failed : Address family not supported",
       "NCCL found no usable network interface: set NCCL_SOCKET_IFNAME to the node's real interface"),
    # aws-ofi-nccl finds no libfabric provider (EFA/verbs) to use: the devices are not visible in
    # the container or libfabric lacks the provider; nothing was sent, so not a fabric fault.
    # NCCL_NET names a network (plugin) this node's NCCL cannot load: "NCCL WARN Error: network AWS
    # Libfabric not found" (the plugin's library missing or misnamed, e.g. NCCL_NET_PLUGIN=ofi).
    _r("ofi-no-provider", EN, 72, r"NET/OFI [^\n]{0,120}(fi_getinfo\(\) call failed|No eligible providers|Unable to find a (usable )?provider|Couldn't find (any )?(optimal )?provider)|NCCL WARN Error: network [^\n]{1,60} not found",
       "the NCCL OFI plugin found no usable libfabric provider: expose /dev/infiniband (EFA/verbs devices) to "
       "the container and check FI_PROVIDER and the libfabric install"),
    # A segment NCCL could not grow because /dev/shm is full is shared memory exhausted, like the
    # DataLoader's (a container's 64 MB default): host memory. Any other failure to set one up
    # (permission denied, no /dev/shm) is the next row's environment.
    _r("nccl-shm-exhausted", HO, 87, r"NCCL WARN[^\n]{0,200}(/dev/shm|shared memory segment|posix_fallocate)[^\n]{0,200}No space left on device|NCCL WARN Call to posix_fallocate failed: No space left",
       "NCCL could not create its shared-memory segment: /dev/shm is full or too small (--shm-size, --ipc=host)"),
    _r("nccl-shm-setup", EN, 86, r"NCCL WARN[^\n]{0,120}(shared memory segment|/dev/shm|Call to (shm_open|posix_fallocate|shm_unlink) failed)|\bin ncclShmOpen\b",
       "NCCL cannot create its /dev/shm segments: give the container a bigger /dev/shm (--shm-size, --ipc=host)"),
    # Two ranks on one GPU: the launcher's GPU mapping is wrong (NCCL then says "invalid usage").
    _r("duplicate-gpu-per-rank", EN, 72, r"Duplicate GPU detected",
       "two ranks share one GPU: fix the launcher's GPU mapping (CUDA_VISIBLE_DEVICES, --gpus-per-task, "
       "torch.cuda.set_device(local_rank))"),
    _r("port-in-use", EN, 66, r"errno: 98 - Address already in use|\[Errno 98\] Address already in use|EADDRINUSE",
       "the rendezvous/master port is taken (another job or a leftover process): pick another MASTER_PORT"),
    # The node cannot resolve the job's user (passwd/LDAP/sssd not set up on it). Containers run as an
    # unnamed uid print the same harmless line, so it only decides when nothing else does (weaker
    # than an explicit success line, stronger than bare progress).
    _r("user-lookup-failed", EN, 4, r"cannot find name for (user|group) ID [0-9]+|No passwd entry for user|getpwuid(_r)?(\(\))?:? failed|I have no name!",
       "the node does not know the job's user or group (passwd/LDAP/sssd): fix the node's identity set-up", confidence=0.45),
    # The scheduler refused the job's request at submission (time limit over the partition's, unknown
    # account/partition, a node configuration no node has): the request, not the cluster.
    _r("scheduler-request-rejected", EN, 66, r"Unable to create step for job [0-9]+: (Invalid|Requested node configuration is not available|More processors requested)|Batch job submission failed: |Unable to allocate resources: (Invalid|Requested|Job violates|Node count specification|More processors requested)|qsub: (submit error|Job (rejected|exceeds))|bsub: [^\n]{0,80}(rejected|not submitted)",
       "the scheduler refused the job's request (time limit, partition, account, node configuration): fix the request"),
    # ...or reaches it and is refused: no key for the user there, or an unknown host key.
    _r("ssh-connect-failed", EN, 72, r"ssh: connect to host[^\n]{0,80}(Connection refused|No route to host|timed out)|Permission denied \(publickey|Host key verification failed",
       "launcher cannot ssh to a node: check sshd, port and keys"),
    # A peer reached at 172.17.0.1, the address of Docker's default bridge (docker0) that every
    # Docker host has: NCCL, Gloo, UCX or MPI picked the bridge as the job's interface, so ranks on
    # different hosts try to reach their own host (Docker networking docs; NCCL_SOCKET_IFNAME,
    # GLOO_SOCKET_IFNAME, UCX_NET_DEVICES select the interface). Above the fabric and c10d-store
    # rows (83-86) whose words the same failed connection prints.
    _r("docker-bridge-peer", EN, 87, r"172\.17\.0\.1[^\n]{0,80}(refused|No route to host|unreachable|timed out)|(refused|unreachable|timed out|failed)[^\n]{0,120}172\.17\.0\.1\b",
       "the job connected to 172.17.0.1, Docker's bridge (docker0): set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / UCX_NET_DEVICES to the cluster interface",
       confidence=0.8),
    # A GPU left in confidential-computing mode on a host (or guest) that does not run it: the
    # driver refuses the GPU ("CPU does not support confidential compute"); NVIDIA's CC deployment
    # guide sets the mode with gpu-admin-tools. The node's configuration, not a faulty GPU.
    _r("gpu-cc-mode-mismatch", EN, 97, r"does not support confidential compute|confComputeConstructEngine[^\n]{0,80}(fail|not support)",
       "the GPU is in confidential-computing mode the host does not support: set its CC mode (gpu-admin-tools) to match", confidence=0.8),
    # ROCm's runtime failing to start on this GPU or platform: rocminfo's "hsa api call failure",
    # "ROCR: unsupported GPU", or HSA_STATUS_ERROR_OUT_OF_RESOURCES without a memory figure (AMD's
    # answers: a GPU off the supported list, a ROCm release without WSL support). Round AB's first
    # form read the bare status as device OOM; round AF's three rocminfo rows showed that wrong.
    _r("rocm-runtime-init-failed", EN, 72, r"hsa api call failure at|ROCR: unsupported GPU|HSA_STATUS_ERROR_OUT_OF_RESOURCES",
       "the ROCm runtime could not start on this GPU/platform: check the GPU against ROCm's supported list and the ROCm release (WSL support, driver)",
       confidence=0.6, caseless=False),
    # A tool that refuses to run without root (a profiler needing a kernel setting, a launcher
    # refusing to run as root): the job's environment, not its code.
    _r("needs-root", EN, 72, r"(run|rerun|execute)[^\n]{0,20} (as|with) root privileges?|(requires?|needs?) root privileges?|must be run as root\b",
       "the program needs root (or refuses it): run it with the privileges it asks for, or change the node setting it names",
       confidence=0.7),
    # --- NCCL / c10d timeouts --------------------------------------------------------------------
    _r("nccl-watchdog-timeout", NC, 60, r"Watchdog caught collective operation timeout|collective operation timeout",
       "a collective timed out: find the straggling rank/node (check its Xid/IB logs) before requeueing"),
    _r("nccl-work-timeout", NC, 60, r"Timeout at NCCL work|ran for [0-9]+ milliseconds before timing out|WorkNCCL[^\n]{0,200}timed? ?out",
       "a collective timed out: find the straggling rank/node before requeueing"),
    _r("nccl-watchdog-stuck", NC, 59, r"watchdog got stuck for|Heartbeat monitor timed out|NCCL watchdog|NCCL communicator was aborted|Timeout waiting for NCCL",
       "NCCL watchdog fired: a rank hung; check the other ranks and nodes"),
    _r("horovod-stalled-ranks", NC, 58, r"Stalled ops|waiting for (the )?remainder of ranks|missing ranks: [0-9]",
       "Horovod collectives stalled waiting for ranks: find the missing rank (crashed, slow or a different code path)"),
    _r("gloo-timeout", NC, 57, r"Timed out waiting [0-9]+ ?ms for (recv|send) operation|gloo[^\n]{0,200}(timed out|Timed out waiting)",
       "a gloo collective timed out: a peer rank hung or died; look at the other ranks"),
    # HCCL checks that every rank calls a collective with the same arguments (CANN EI0005): when they
    # differ the script issued mismatched collectives, a bug, not a hang of the fabric.
    # CANN EJ0001: HCCL cannot start its HCCP process because the last training job still holds the
    # NPUs (the error's own text and solution: kill it, wait 10 s, retry): the node's state, not a fault.
    _r("npu-held-by-last-job", EN, 63, r"\bEJ0001\b[^\n]{0,80}HCCP process|Failed to initialize the HCCP process|(Maybe )?[Tt]he last training process is running",
       "a previous job still holds the NPUs: kill its processes (npu-smi info), wait 10 s and rerun; an epilog that cleans up prevents it"),
    _r("hccl-collective-mismatch", SW, 62, r"\bEI0005\b|arguments for collective communication are inconsistent between ranks",
       "ranks called a collective with different arguments (count, dtype, op): " + USER),
    # HCCL's own timeouts (torch_npu troubleshooting "HCCL timeout", CANN error code EI0002: a rank
    # waited on a notify record its peer never sent).
    _r("hccl-timeout", NC, 60, r"\bEI0002\b|The wait execution of the Notify register times out|HCCL[^\n]{0,60}\b(timed out|timeout|time out)\b",
       "an HCCL collective timed out: a peer rank exited or hung; find it (and its node) before requeueing"),
    # AWS Neuron's collective library (CCOM, the Neuron runtime's NCCL) waiting at bootstrap or on a
    # peer's data: a rank that never arrived or stopped sending, as NCCL's timeouts.
    _r("neuron-ccom-timeout", NC, 60, r"CCOM WARN Timeout waiting for|\bCCOM\b[^\n]{0,60}\b(timed out|timeout)\b",
       "a Neuron collective (CCOM) timed out waiting for a peer rank: find the rank (and node) that never arrived or hung before requeueing"),
    _r("nccl-ops-timed-out", NC, 58, r"Some NCCL operations have failed or timed out",
       "NCCL operations timed out: check the other ranks and nodes"),
    _r("c10d-store-timeout", NC, 57, r"DistStoreError|Timed out after [0-9]+ seconds waiting for clients|Socket Timeout|wait timeout after [0-9]+ms",
       "rendezvous/store timed out: a rank never arrived; check the missing nodes"),
    _r("dist-timeout", NC, 50, r"(NCCL|c10d|ProcessGroup|barrier|all_?reduce|allgather|broadcast)[^\n]{0,120}(timed out|timeout)",
       "a distributed operation timed out: look for a dead or slow rank", confidence=0.6),
    # --- Host memory -----------------------------------------------------------------------------
    # runc's "container init was OOM-killed": the container's memory cgroup, the same kill.
    _r("oom-killer", HO, 88, r"invoked oom-killer|Out of memory: Kill(ed)? process|oom-kill:|Memory cgroup out of memory|OOM-killed",
       "host RAM exhausted (OOM killer): ask the user to lower memory use or request more --mem"),
    # The rest of the kernel's OOM report (mm/oom_kill.c, show_mem): the killed task's line, the
    # reaper, and a memory summary with swap gone; any one of them in a job's dmesg excerpt.
    _r("kernel-oom-report", HO, 84, r"Killed process [0-9]+ \([^\n)]{1,40}\) total-vm|oom_reaper: reaped process|Out of memory and no killable processes|Free swap += 0kB",
       "the kernel ran out of RAM (its OOM report): ask the user to lower memory use or request more --mem", confidence=0.75),
    # sacct cuts a state to its column: OUT_OF_MEMORY prints as `OUT_OF_ME+` at the default width.
    # Case-sensitive: Slurm spells its state OUT_OF_MEMORY in capitals, and RAPIDS' device allocator
    # throws `rmm::out_of_memory` ("out_of_memory: CUDA error at: ...", framework-gpu-oom) in lower case.
    _r("slurm-oom-kill", HO, 88, r"[Oo][Oo][Mm][-_]kill event|out-of-memory handler|(^|[^\n_A-Za-z])OUT_OF_(MEMORY|ME\+)|task [0-9]+: Out Of Memory|OOMKilled",
       "Slurm killed the job for exceeding its memory: request more --mem or reduce usage", caseless=False),
    # HPE Cray's node memory monitor says `under_oom detected` while the job's cgroup sits at its limit.
    _r("memory-limit-exceeded", HO, 84, r"Exceeded (job|step) memory limit|low on resource: memory|memory limit exceeded|Memory limit reached|under_oom detected",
       "the job went over its memory limit: request more --mem or reduce host memory use"),
    # Other schedulers' own words for a memory-limit kill (LSF, PBS/Torque, Moab, Grid Engine,
    # HTCondor; HTCondor holds a job over its request_memory rather than killing it).
    _r("scheduler-memory-limit", HO, 84, r"TERM_MEMLIMIT|job killed: (p|v)?mem [0-9]+[kmgt]?b exceeded limit|exceeded a memory resource limit|exceeded (MEM|memory) usage hard limit|exceeds? job hard limit \"?h_(vmem|rss)|memory usage exceeded request_memory|job has gone over memory limit|(put on hold|held)[^\n]{0,80}(due to|because of|for) (excessive |too much )?memory( usage)?\b",
       "the scheduler killed the job for exceeding its memory limit: request more memory or reduce usage"),
    # Ray's memory monitor: every kill message ends pointing at its OOM-prevention page and threshold.
    _r("ray-memory-monitor", HO, 85, r"node running low on memory|killed due to memory pressure|exceeds the memory usage threshold|ray-oom-prevention\.html|RAY_memory_usage_threshold",
       "Ray's memory monitor killed workers (host RAM nearly full): fewer workers per node or more RAM"),
    _r("tf-host-oom", HO, 81, r"OOM when allocating tensor[^\n]{0,300}(device:CPU|by allocator cpu)",
       "host RAM exhausted (TensorFlow allocating on the CPU): reduce batch/model size or request more --mem"),
    _r("dataloader-killed", HO, 82, r"DataLoader worker[^\n]{0,60}killed by signal: Killed",
       "a DataLoader worker was OOM-killed: fewer workers or less host memory per worker"),
    # PaddlePaddle's DataLoader workers map their batches in /dev/shm (mmap_allocator.cc): `Memory map
    # failed when create shared memory` is the same full /dev/shm.
    _r("dataloader-shm", HO, 80, r"Memory map failed when create shared memory|out of shared memory|insufficient shared memory|raise your shared memory limit|DataLoader worker[^\n]{0,60}killed by signal: Bus|No space left on device[^\n]{0,80}shm|/dev/shm",
       "shared memory (/dev/shm) exhausted: raise shm size or use fewer DataLoader workers"),
    # Dask's nanny restarts a worker that passes its memory limit's terminate fraction (95% by default,
    # distributed.worker.memory.terminate; Dask docs, "Worker memory management"): host RAM.
    _r("dask-worker-memory", HO, 79, r"exceeded [0-9]+% memory budget",
       "a Dask worker ran past its memory limit and its nanny restarted it: give workers more memory (or fewer "
       "threads each), or split the work into smaller partitions"),
    # POSIX semaphores and torch's shared CPU storage live in /dev/shm: "No space left on device"
    # raised while creating one (a SemLock frame, a /torch_ shm file) is shared memory, not a disk.
    _r("shm-object-exhausted", HO, 79,
       r"_multiprocessing\.SemLock\(|SemLock\.__init__\(|unable to write to file </torch_|_share_filename_cpu_|shm_open[^\n]{0,80}(No space|failed|error)|unable to (mmap|open shared memory object)[^\n]{0,60}(torch|shm)",
       "/dev/shm (shared memory for semaphores and DataLoader tensors) is full or too small: raise the "
       "container's --shm-size / use --ipc=host, or fewer DataLoader workers; not a full disk"),
    # UCX's shared-memory transports live in /dev/shm too: "uct_iface_open(posix/memory) failed: Out of
    # memory" is a container's 64 MB /dev/shm, not RAM.
    _r("ucx-shm-exhausted", HO, 80, r"uct_iface_open\((posix|sysv)/memory\) failed|UCX +ERROR[^\n]{0,80}(posix|sysv)[^\n]{0,40}(Out of memory|No space left)",
       "UCX could not create its shared-memory transport: /dev/shm is full or too small (--shm-size, --ipc=host)"),
    _r("py-MemoryError", HO, 80, r"(^|[^\nA-Za-z])MemoryError\b", "host RAM exhausted in Python: reduce memory use", caseless=False),
    # RDMA pins its buffers: ENOMEM from ibv_create_cq/ibv_reg_mr is the locked-memory limit, not
    # RAM (rdma-core ibv_reg_mr(3); NCCL troubleshooting: memlock must be unlimited).
    # libfabric's EFA provider says it as -12 (FI_ENOMEM) while posting its receive buffers (AWS's
    # EFA troubleshooting: max locked memory 65536 -> ulimit -l unlimited).
    _r("rdma-memlock", EN, 87, r"ibv_(create_cq|create_qp|reg_mr|create_srq|alloc_pd)[^\n]{0,60}Cannot allocate memory|max locked memory \(ulimit -l\)|RLIMIT_MEMLOCK|locked memory limit|Libfabric error: \(-12\) Cannot allocate memory|Failure to post internal receive buffers",
       "RDMA could not pin memory: raise the locked-memory limit (ulimit -l unlimited; slurmd's LimitMEMLOCK, PropagateResourceLimits)"),
    _r("cpp-bad-alloc", HO, 78, r"std::bad_alloc|Cannot allocate memory|\[Errno 12\]",
       "host allocation failed: reduce memory use or request more --mem", confidence=0.75),
    # The launcher's own "child failed with -9" line (and Python subprocess's, GCC's `internal
    # compiler error: Killed (program cc1plus)`): most often the host OOM killer. The signal-only
    # forms (torchrun's Root Cause block, mp.spawn, a compiler driver's "died due to signal 9")
    # stay crash_signal, see "sigkill".
    _r("launcher-child-sigkilled", HO, 32, r"failed \(exitcode: -9\)|exits with return code = -9\b|returned non-zero exit status -9\b|internal compiler error: Killed \(program [a-z0-9+]+\)",
       "a rank was SIGKILLed, most often by the host OOM killer: check dmesg / sacct MaxRSS", confidence=0.55),
    _r("deepspeed-killing-subprocess", HO, 21, r"sigkill_handler\] Killing subprocess",
       "DeepSpeed killed its ranks after one died silently (no error printed: usually the OOM killer); check dmesg / MaxRSS",
       confidence=0.45),
    # bash's job-status word for SIGKILL in other locales (zh_CN, zh_TW, de, fr, ru, ja).
    _r("process-killed", HO, 22, r"(^|[ *\]])Killed( |\*|\.|\r|$)|已杀死|已殺死|Getötet|Processus arrêté|Убито|強制終了",
       "the process was SIGKILLed, most often by the OOM killer: check dmesg / sacct MaxRSS",
       confidence=0.55, caseless=False),
    # --- CUDA / accelerator memory ----------------------------------------------------------------
    # Page-locked (pinned) host memory the CUDA driver could not get: host RAM, whatever the CUDA
    # error code says (CUDA_ERROR_OUT_OF_MEMORY is also what cuMemHostAlloc returns); XLA/TF name
    # their host-side allocator (`xla_gpu_host_bfc`). Above the device OOM rows whose words it shares.
    _r("host-pinned-memory-exhausted", HO, 82, r"could not allocate pinned host memory|failed to alloc [0-9]+ bytes on host\b|Allocator \([a-z_]*host_bfc\) ran out of memory|cuda(HostAlloc|MallocHost)[^\n]{0,60}(out of memory|failed)",
       "the node ran out of pinned (page-locked) host memory: less host offload / pinned buffers, or a node with more RAM"),
    _r("cuda-oom", CO, 80, r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory|\b(NPU|XPU|HPU) out of memory|MPS backend out of memory|\b(UR|ZE)_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
       "GPU memory exhausted: smaller batch, activation checkpointing, or more GPUs"),
    _r("tf-oom", CO, 80, r"OOM when allocating tensor|ResourceExhaustedError",
       "GPU memory exhausted (TensorFlow): smaller batch or model"),
    # ROCm's runtime (HSA) failing to allocate on the GPU with the device's free memory at zero:
    # "HSA_STATUS_ERROR_OUT_OF_RESOURCES: ... Available Free mem : 0 MB" (ROCm HIP runtime,
    # rocdevice.cpp). The status alone is not memory: see rocm-runtime-init-failed.
    _r("rocm-hsa-out-of-resources", CO, 80, r"Available Free mem : 0 MB",
       "the ROCm runtime could not allocate on the GPU: its memory is full: smaller batch, free device memory between steps",
       confidence=0.75, caseless=False),
    # XLA (JAX, torch_xla, TF on TPU) says RESOURCE_EXHAUSTED with the memory space: hbm is the
    # accelerator's own memory (openxla/xla status messages; Cloud TPU troubleshooting guide).
    _r("xla-oom", CO, 80, r"RESOURCE_EXHAUSTED: (Out of memory|Failed to allocate|Attempting to (reserve|allocate)|Error allocating device buffer|[^\n]{0,120}memory space hbm)|Ran out of memory in memory space (hbm|vmem)|Out of memory while trying to allocate|Resource exhausted: [^\n]{0,160}(memory|hbm|allocat)|HBM capacity [0-9.]+ ?[KMGT]|Program hbm requirement|Attempting to reserve [0-9.]+ ?[KMGT]i?B? at the bottom of memory",
       "accelerator memory exhausted (XLA/JAX): smaller batch or model"),
    # TensorFlow's BFC allocator dumps its chunk table only when an allocation fails.
    _r("tf-bfc-oom", CO, 79, r"Allocator \([^\n)]{1,40}\) ran out of memory|bfc_allocator\.cc:[0-9]+\][^\n]{0,20}(Sum Total of in-use chunks|Summary of in-use Chunks|Bin \([0-9]+\): +Total Chunks|InUse at [0-9a-fx]+)",
       "GPU memory exhausted (TensorFlow BFC allocator dump): smaller batch or model, or allow_growth"),
    # Other frameworks' words for a failed device allocation (MXNet storage manager, PaddlePaddle,
    # ONNX Runtime's CUDA_CALL, Caffe's CUDA_CHECK: cudaErrorMemoryAllocation = 2; the NVHPC OpenACC
    # runtime's allocation failure with its total/free table; Ascend's CANN runtime: rtMalloc failing
    # with "driver error:out of memory", halMemAlloc with drvRetCode 6; HPC codes' own words: AMReX's
    # `CUDA error 2 ... out of memory`, Neko's `Memory allocation on device failed`, SPECFEM's
    # `CUDA error !!!!! <out of memory>`); CUDA's error string for cudaErrorMemoryAllocation ("out of
    # memory") reported at a `.cu` source line (HugeCTR's `Runtime error: out of memory .../metrics.cu:461`);
    # Thrust/CUB algorithms on the CUDA backend throwing system_error `parallel_for failed: out of memory`;
    # a C++ runtime's wrapper of the same string (TurboMind's `CUDA runtime error: out of memory`);
    # RAPIDS Memory Manager's rmm::out_of_memory (cuDF, cuML, Dask-CUDA workers); MXNet's mshadow
    # CHECK on a failed allocation (`Check failed: e == cudaSuccess: CUDA: out of memory`).
    # The other GPU APIs' own codes for a failed device allocation: OpenCL's
    # CL_MEM_OBJECT_ALLOCATION_FAILURE (OpenCL 3.0 API spec, "failure to allocate memory for buffer
    # object"; not CL_OUT_OF_RESOURCES, which NVIDIA's OpenCL also returns for a crashed kernel) and
    # Vulkan's VK_ERROR_OUT_OF_DEVICE_MEMORY (Vulkan spec, "a device memory allocation has failed";
    # vulkan.hpp spells it ErrorOutOfDeviceMemory).
    _r("framework-gpu-oom", CO, 81, r"CUDA error[ !<(\[]{1,12}out of memory|CUDA (runtime|driver) error[^\n]{0,8}: out of memory|rmm::out_of_memory|\bout_of_memory: CUDA error at|\bCUDA: out of memory\b|CL_MEM_OBJECT_ALLOCATION_FAILURE|VK_ERROR_OUT_OF_DEVICE_MEMORY|ErrorOutOfDeviceMemory|\bout of memory[^\n]{0,200}\.cuh?:[0-9]+|thrust::system::detail::bad_alloc|\b(parallel_for|for_each|transform|reduce|scan|sort|copy|fill|get_temporary_buffer)[a-z_:]* failed[^\n]{0,40}: out of memory|(cudaMalloc|cuMemAlloc)( retry)? failed[^\n]{0,40}out of memory|cudaMalloc\([^\n]{0,80}\) failed with error out of memor|GPUassert: out of memory|CUDA error 2\b[^\n]{0,200}out of memory|(memory )?allocation on (the )?(device|GPU) failed|(device|GPU) memory allocation failed|failed to allocate (device|GPU) memory|Out of memory error on GPU|CUDA failure 2: out of memory|cudaSuccess \(2 vs\. 0\) +out of memory|out of memory on (GPU|device) [0-9]|Out of memory allocating [0-9]+ bytes of device memory|total/free CUDA memory: [0-9]+/[0-9]+|rtMalloc execute failed, reason=\[driver error:out of memory\]|halMemAlloc failed[^\n]{0,120}drvRetCode=6\b|MODULE:(SYNHELPER|PT_DEVMEM)[^\n]{0,40}Allocation (of size ::[0-9]+ )?failed",
       "GPU memory exhausted: smaller batch or model"),
    # A training or inference loop that catches the framework's device OOM and skips the batch (fairseq's
    # `| WARNING: ran out of memory, skipping batch`, Boltz's predictor): host RAM running out cannot be
    # caught and skipped like that, the kernel kills the process.
    _r("oom-batch-skipped", CO, 79, r"ran out of memory[^\n]{0,40}skipping (the )?(batch|step|example)|\bOOM\b[^\n]{0,40}skipping (the )?(batch|step)",
       "GPU memory ran out and the batch was skipped: smaller batch or input, or a GPU with more memory"),
    _r("kv-cache-no-memory", CO, 79, r"No available memory for the cache blocks|# GPU blocks: 0\b|larger than the maximum number of tokens that can be stored in KV cache",
       "no GPU memory left for the KV cache: lower max_model_len or raise gpu_memory_utilization / use more GPUs"),
    _r("cublas-not-initialized", CO, 56, r"CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate",
       "cuBLAS could not create a handle, almost always because GPU memory is already full", confidence=0.55),
    _r("cublas-alloc-failed", CO, 78, r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|failed to allocate [0-9.]+ ?[KMGT]i?B|failed to allocate [^\n]{0,60}(from|on) device",
       "GPU allocation failed: GPU memory is exhausted"),
    # --- Storage ---------------------------------------------------------------------------------
    # Hugging Face datasets checks the cache volume itself before it writes: "Not enough disk space. Needed: ...".
    # glibc's strerror/strsignal speak the node's locale: ENOSPC, EIO, SIGSEGV and SIGBUS in the
    # translations HPC sites run (zh_CN, de, fr, es, ja, ru), as a Java or shell error quotes them.
    _r("no-space-left", IO, 76, r"No space left on device|\[Errno 28\]|ENOSPC|Not enough disk space\. Needed:|设备上没有空间|Auf dem Gerät ist kein Speicherplatz mehr|Aucun espace disponible sur le périphérique|No queda espacio en el dispositivo|デバイスに空き領域がありません|На устройстве не осталось свободного места",
       "a filesystem is full: free space or move output; check quotas"),
    # TensorFlow raises ResourceExhaustedError for a full quota too (SaveV2): the disk, not the GPU.
    _r("tf-exhausted-disk", IO, 81, r"ResourceExhaustedError: [^\n]{0,200}(disk quota exceeded|No space left on device)",
       "the checkpoint write hit the disk quota / a full disk (TensorFlow says ResourceExhausted): free space or save fewer checkpoints"),
    _r("disk-quota", IO, 76, r"Disk quota exceeded|\[Errno 122\]|EDQUOT|quota exceeded|Quota violation|Block limit reached on",
       "disk quota exceeded: ask the user to clean up or raise the quota"),
    _r("io-error", IO, 75, r"Input/output error|\[Errno 5\]|I/O error|输入/输出错误|Eingabe-/Ausgabefehler|Erreur d'entrée/sortie",
       "I/O error on a filesystem or disk: check the storage and the node's dmesg"),
    _r("stale-file-handle", IO, 75, r"Stale (NFS )?file handle|\[Errno 116\]|ESTALE",
       "stale NFS handle: the file server remounted/failed; check the mount on the node"),
    _r("read-only-fs", IO, 74, r"Read-only file system|\[Errno 30\]",
       "filesystem went read-only (often after disk errors): check the node's storage"),
    # fsspec (s3fs, gcsfs, HTTP datasets streamed from an object store) gives up on a stalled read; a
    # FUSE filesystem over an object store (JuiceFS) logs its slice reads, chunk uploads and flushes
    # timing out when the store behind it is slow or failing.
    _r("object-store-timeout", IO, 74, r"FSTimeoutError|juicefs\[[0-9]+\] <(WARNING|ERROR)>: [^\n]{0,120}timeout after",
       "a read from the object store timed out (fsspec/s3fs): a dropped long-lived connection; retry, cache the data locally"),
    # ECOMM (`Communication error on send`) is what a BeeGFS client returns when a storage server
    # is gone; its quota tool names the offline storage target.
    _r("fs-not-responding", IO, 74, r"nfs: server [^\n]{0,80}not responding|Transport endpoint is not connected|Cannot send after transport endpoint shutdown|LustreError|Lustre:[^\n]{0,160}(lost|evict|not responding|timed out)|gpfs[^\n]{0,80}(unmounted|stale|error)|Communication error on send|from storage target\. Is the node offline",
       "network filesystem unavailable: check the mount and the file server"),
    # The kernel's hung-task report (`task X blocked for more than 120 seconds`, then its stack):
    # a stack frame in a network or parallel filesystem's module (GPFS mmfs, Lustre and its
    # ptlrpc/LNet, NFS/SUNRPC, Ceph, BeeGFS, Weka) means the task sleeps in D state waiting on
    # that filesystem, the classic frozen-mount hang; a frame elsewhere says nothing of storage.
    _r("fs-hung-task", IO, 74, r"\+0x[0-9a-f]+/0x[0-9a-f]+ \[(mmfs26|mmfslinux|mmfs|lustre|llite|ptlrpc|lnet|ko2iblnd|osc|mdc|lmv|lov|nfs|nfsv3|nfsv4|sunrpc|ceph|libceph|beegfs|wekafs)\]",
       "a process hung in the network filesystem's kernel code (hung-task report): check the mount and the file server; the job cannot go on until it returns", confidence=0.7),
    # DiskPressure is only a disk problem when it is True: `kubectl describe node` lists the
    # condition on every node, with False / Unknown most of the time.
    _r("evicted-disk-pressure", IO, 75, r"low on resource: ephemeral-storage|ephemeral local storage usage exceeds|condition: \[DiskPressure\]|DiskPressure +True|node\.kubernetes\.io/disk-pressure",
       "the pod was evicted because the node's disk filled up: free space or raise the ephemeral-storage limit"),
    _r("file-write-failed", IO, 74, r"file write failed|PytorchStreamWriter failed writing|failed to write (file|checkpoint)|short write|wrote [0-9]+ (blocks|bytes|items|elements) instead of [0-9]+",
       "writing a checkpoint/output failed: check free space, quota and the filesystem"),
    # TensorFlow reports a checkpoint write on a full disk as "Resource exhausted: <path>.tempstate".
    _r("tf-checkpoint-write-exhausted", IO, 76, r"Resource exhausted: [^\n]{0,300}tempstate",
       "a checkpoint write failed (TensorFlow: usually a full disk or quota): free space, check quotas"),
    # A data shard cut short (WebDataset's tar shards: tarfile.ReadError; gzip/bz2/lzma streams ended
    # early) is the same fault in the input: not `unexpected end of data` alone, which is also a
    # UnicodeDecodeError's wording.
    _r("corrupt-checkpoint", IO, 66, r"tarfile\.ReadError|Compressed file ended before the end-of-stream marker|failed finding central directory|PytorchStreamReader failed|unexpected EOF|file might be corrupted|truncated file|storage has wrong size|HeaderTooLarge|Error while deserializing header",
       "a checkpoint/data file is truncated or corrupt: check the writer and free space", confidence=0.7),
    # --- Environment -----------------------------------------------------------------------------
    # A kernel module that will not load (built for another kernel or another ZFS/OFED, missing
    # symbols): the installation. At 76 it beats the `LustreError:` prefix (74) that Lustre's own
    # report of it carries.
    _r("kernel-module-load-failed", EN, 76, r"Can't load module '|modprobe: (FATAL|ERROR): [^\n]{0,120}(not found|Could not insert)|Unknown symbol in module|disagrees about version of symbol",
       "a kernel module failed to load (built for another kernel, ZFS or OFED): rebuild or reinstall it for what the node runs"),
    _r("py-ModuleNotFoundError", EN, 72, r"ModuleNotFoundError|No module named",
       "a Python package is missing in the job's environment: fix the env/container"),
    _r("shared-lib-missing", EN, 72, r"cannot open shared object file|Could not load (dynamic )?library|undefined symbol|version `GLIBC|GLIBCXX_[0-9.]+' not found|CXXABI_[0-9.]+' not found",
       "a shared library is missing or incompatible: fix LD_LIBRARY_PATH / rebuild the extension"),
    # A compiled extension built against another NumPy ABI (NumPy's own import-time checks).
    _r("numpy-abi-mismatch", EN, 72, r"numpy\.(ndarray|dtype) size changed, may indicate binary incompatibility|compiled using NumPy 1\.x cannot be run in|numpy\.core\.multiarray failed to import",
       "a compiled module was built against another NumPy version: rebuild or pin numpy to the version it was built for"),
    # slurmd refusing RPCs from a uid that is not SlurmUser/root: the uids of slurm (or munge) differ
    # between nodes and the controller (a cluster set-up error; Slurm's "Security violation").
    _r("slurm-uid-mismatch", EN, 72, r"error: Security violation[,:]? [^\n]{0,40}(RPC|kill_job\([0-9]+\))[^\n]{0,20} from uid [0-9]+",
       "slurmd refuses the controller's RPCs (Security violation from uid N): SlurmUser/munge uids differ between nodes; fix the accounts and restart slurmd"),
    _r("py-ImportError", EN, 70, r"ImportError: |DLL load failed",
       "an import failed: fix the job's environment"),
    # CUDA's cudaErrorUnsupportedPtxVersion (222) is the same mismatch seen from the JIT: "the PTX
    # was generated by a compiler newer than what is supported by the CUDA driver" (CUDA runtime API).
    # CUDA error 34 (cudaErrorStubLibrary): the toolkit's stub libcuda.so was found before the
    # driver's, e.g. a build's lib/stubs directory left on LD_LIBRARY_PATH.
    _r("driver-too-old", EN, 73, r"driver on your system is too old|CUDA driver is a stub library|cudaErrorStubLibrary|CUDA_ERROR_STUB_LIBRARY|system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY|NVRM: API mismatch: the client has the version|driver version is insufficient|Driver/library version mismatch|CUDA driver version is insufficient|forward compatibility was attempted|cudaErrorInsufficientDriver|cudaErrorSystemDriverMismatch|cudaErrorCompatNotSupportedOnDevice|CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE|system has unsupported display driver / cuda driver combination|Cuda driver error (803|804)\b|CUDA_ERROR_UNSUPPORTED_PTX_VERSION|cudaErrorUnsupportedPtxVersion|PTX was compiled with an unsupported toolchain",
       "driver and CUDA runtime do not match: use a matching container or update the driver"),
    # nvidia-smi's `No devices were found` (and an application's `no GPU was detected`): the job's
    # cgroup or container holds no GPU (none requested, no GPU runtime) or the build has no kernels
    # for it; a GPU that died says so in the kernel log (Xid 79), which wins.
    _r("no-cuda-device", EN, 72, r"no CUDA-capable device|No CUDA GPUs are available|\bNo devices were found\b|\bno (compatible )?GPUs? (is|are|was|were) detected\b|Found no NVIDIA driver|CUDA_ERROR_NO_DEVICE|NVIDIA-SMI has failed|Torch not compiled with CUDA|CUDA driver initialization failed|cuInit: CUDA_ERROR|CUDA unknown error - this may be due to an incorrectly set up environment|please check if device id is valid|No visible GPU devices",
       "no usable GPU/driver in the job: check CUDA_VISIBLE_DEVICES, gres request and the driver"),
    # NVML's `Unknown Error` at initialisation inside a container that the host still sees all GPUs
    # from: the container lost its device cgroup rules (systemd `daemon-reload` with the cgroup
    # driver rewriting them; NVIDIA container toolkit troubleshooting, "Containers losing access to
    # GPUs"). A GPU that died has an Xid (79) or a failing node check (ambiguity.py), which wins.
    _r("nvml-init-unknown-error", EN, 58, r"Failed to initialize NVML: Unknown Error",
       "NVML could not start in the job's container: it lost access to the GPU devices (a systemd daemon-reload "
       "with cgroup-managed device rules); restart the container / pod, and set the runtime's cgroup driver or "
       "pass the /dev/nvidia* devices explicitly; a failing GPU check on the host means the GPU instead"),
    # DCGM's DCGM_ST_VER_MISMATCH: the client (dcgmi, dcgm-exporter, a health agent) and the node's
    # nv-hostengine are different DCGM versions.
    _r("dcgm-version-mismatch", EN, 60, r"\bAPI version mismatch\b|DCGM_ST_VER_MISMATCH",
       "the DCGM client and the node's nv-hostengine are different versions: run matching versions (the exporter "
       "image's DCGM and the host's datacenter-gpu-manager)"),
    # A binary or a compiler that does not know the GPU: nvcc older than the card (`Value 'sm_61' is
    # not defined for option 'gpu-architecture'`), NCCL built without its architecture (`Cuda failure
    # 'named symbol not found'`: NVIDIA/nccl#1372; pytorch/pytorch#152077 on an RTX 5090).
    _r("no-kernel-image", EN, 72, r"no kernel image is available for execution|not compatible with the current PyTorch installation|sm_[0-9]+ is not compatible|Unsupported gpu architecture|CUDA_ERROR_NO_BINARY_FOR_GPU|hipErrorNoBinaryForGpu|Unable to find code object for all current devices|Kokkos::Cuda::initialize ERROR: likely mismatch of architecture|Value 'sm_[0-9]+a?' is not defined for option 'gpu-architecture'|Cuda failure 'named symbol not found'",
       "binary built for another GPU architecture: rebuild or use a matching wheel"),
    _r("cuda-version-mismatch", EN, 71, r"detected CUDA version[^\n]{0,40}mismatches|Installed CUDA version [0-9.]+ does not match the version torch was compiled with|CUDA version [0-9.]+ does not match[^\n]{0,40}(torch|PyTorch)|compiled with different CUDA versions|CUDA_HOME (environment variable )?(is not set|does not exist)",
       "CUDA toolkit versions disagree: align the toolkit with the framework build"),
    # A build toolchain older than the code needs or broken: GCC's own C++11 guard
    # (<bits/c++0x_warning.h>), a project's CMake check of the compiler's C++ standard, CMake's
    # cmake_minimum_required, a compiler that does not know the -std= flag, a CMake that cannot find
    # its own modules. The job's software stack, not its code.
    _r("build-toolchain", EN, 70, r"Could not find CMAKE_ROOT|requires compiler and library support for the (upcoming )?ISO C\+\+ 20[0-9]{2} standard|[Cc]ompiler does (NOT|not) (fully )?support C\+\+ ?[0-9]{2}|CMake [0-9.]+ or higher is required\. +You are running version|unrecognized command[- ]line option .-std=(c|gnu)\+\+[0-9a-z]+",
       "the compiler or CMake is older than this code needs, or broken: load a newer toolchain module (or set CXX), reinstall CMake cleanly, and rebuild"),
    # cuRAND's CURAND_STATUS_INITIALIZATION_FAILED (203, "initialization of CUDA failed", cuRAND
    # API reference): the CUDA runtime could not start under this driver.
    _r("curand-init-failed", EN, 60, r"Curand error 203\b|CURAND_STATUS_INITIALIZATION_FAILED",
       "cuRAND could not initialise CUDA: the driver is older than the CUDA runtime the job uses, or the GPU is not usable; check nvidia-smi and the toolkit/driver pairing"),
    _r("too-many-open-files", EN, 66, r"Too many open files|\[Errno 24\]",
       "the open-files limit is too low for this job: raise ulimit -n or use fewer DataLoader workers"),
    # A package the job's set-up installs is not in its repositories (dnf/yum, apt, pip, conda):
    # the node's repositories, entitlement or index, or a version pin that does not exist.
    # pip could not build a package from source on this node/image (a compiler, header or system
    # library such as ffmpeg's is missing): pip's own summary lines.
    # Not a bare `Failed to build X`: TensorRT says that of an engine.
    _r("pip-build-failed", EN, 70, r"Failed building wheel for |ERROR: Could not build wheels for |Failed to build installable wheels for ",
       "a Python package could not be built from source here (missing compiler, headers or a system library): "
       "install the build dependency or use a prebuilt wheel/conda package", caseless=False),
    _r("package-not-found", EN, 72, r"Error: Unable to find a match: |E: Unable to locate package |No package [^\n ]{1,80} available|Could not find a version that satisfies the requirement|PackagesNotFoundError: |No matching distribution found for ",
       "a package the job installs is not in its repositories (repo, entitlement, index or version pin): fix the node's / image's package sources"),
    # cudaErrorNotSupported (801, CUDA Runtime API: "the attempted operation is not supported on
    # the current system or device"): a capability the node, driver or container lacks (IPC/P2P in
    # a container, GPUDirect through an old libfabric), not a bug in the job.
    _r("cuda-not-supported", EN, 72, r"cudaErrorNotSupported|CUDA_ERROR_NOT_SUPPORTED|CUDA error: operation not supported|Cuda failure 801\b|CUDA driver error: operation not supported",
       "a CUDA operation this node/driver/container does not support: check the container's devices, driver and library versions", caseless=False),
    # NCCL cannot map the node's topology (sysfs paths hidden in WSL or a container, a NIC-fusion
    # bug of NCCL 2.26 fixed in 2.27: NVIDIA/nccl#1748, #573): set-up, not the fabric.
    _r("nccl-topology-detection", EN, 72, r"NCCL WARN Could not find (NET with id|GPU in topology|real path of)|NCCL WARN Attribute [^\n]{1,40} of node [^\n]{1,40} not found",
       "NCCL could not read the node's GPU/NIC topology: expose /sys in the container or use a fixed NCCL version"),
    # A library's own version check (OpenMMLab's "MMCV==1.3.5 is used but incompatible. Please install
    # mmcv>=...", transformers' require_version "... is required for a normal functioning of this
    # module, but found x==y"): the environment, not the AssertionError it raises. pip's resolver
    # warning ("requires x>=2, but you have x 1.9") is left out: installs print it and then run fine.
    # Ray's own check that a driver matches its cluster ("Version mismatch: The cluster was started
    # with: Ray ... Python ...") is the same family.
    _r("package-version-incompatible", EN, 72, r"==[^\n ]{1,40} is used but incompatible|is required for a normal functioning of this module, but found|Version mismatch: The cluster was started with",
       "an installed package is a version another one does not accept: pin compatible versions in the job's environment"),
    _r("command-not-found", EN, 68, r"command not found|: not found\b|No such file or directory: '(nvcc|python|torchrun|deepspeed)'|execve\(\): [^\n]{0,120}No such file or directory",
       "a required program is not on PATH in the job environment"),
    _r("orte-launch-failed", EN, 66, r"ORTE was unable to reliably start one or more daemons",
       "mpirun could not start its daemons: check PATH/LD_LIBRARY_PATH and ssh on all nodes"),
    # Families from round K (scored first, then generalised): the job's container, loader or MPI
    # set-up failing before any training code ran.
    _r("container-runtime-failed", EN, 72, r"pyxis: (failed to|couldn't) (import|create|start|execute)|\benroot(-[a-z]+)?: (error|\[ERROR\])|FATAL: +(container creation failed|while (extracting|making|creating)[^\n]{0,40}image|could not open image)|nvidia-container-cli: (initialization|mount|ldcache|detection) error|OCI runtime (create|exec) failed|failed to create (shim )?task|no runtime for \"?nvidia\"? is configured|Squashfs image uses [a-z0-9]+ compression, this version supports only|toomanyrequests: You have reached your pull rate limit",
       "the job's container could not be set up (pyxis/enroot, Apptainer, nvidia-container-toolkit): fix the runtime's configuration or the image"),
    _r("cuda-library-not-found", EN, 71, r"lib(cudart|cuda|nccl|cudnn|cublas)[a-z0-9_]*\.so[^\n]{0,40}\bnot found|did not contain \[?'lib[a-z0-9_]+\.so|(could not|unable to|failed to) (find|locate|load) (the )?(lib)?(cuda|cudart|nccl|cudnn|cublas)( runtime| library| libraries|\.so)",
       "a CUDA library is not found where the job looks: fix LD_LIBRARY_PATH or the package's CUDA set-up"),
    # Cray MPICH asked for GPU buffers (MPICH_GPU_SUPPORT_ENABLED=1) without its GTL library linked.
    # Slurm cannot load a plugin the job or the site's config names (srun --mpi=pmix_v3 on a Slurm
    # built without it, a plugin built for another Slurm): Slurm's plugin loader's own words.
    _r("slurm-plugin-missing", EN, 72, r"Couldn't find the specified plugin name for [a-z_]+/[A-Za-z0-9_]+|cannot find [a-z_]+ plugin for [a-z_]+/|Unable to load any plugin|Invalid MPI type '|plugin_load_from_file: Incompatible Slurm plugin",
       "Slurm could not load a plugin (an MPI type the site's Slurm lacks, a plugin built for another version): use `srun --mpi=list` and a type it has, or fix the site's Slurm build"),
    _r("mpi-init-failed", EN, 66, r"GPU_SUPPORT_ENABLED is requested, but GTL library is not linked|error occurred in MPI_Init|before MPI_INIT completed|MPI_Init(_thread)? (failed|returned)|PMIx?_Init failed|PMI2_Init failed",
       "MPI could not initialise: the MPI library, its launcher (PMI/PMIx) and the job's mpi4py/build disagree"),
    # --- Numerical -------------------------------------------------------------------------------
    _r("loss-nan", NU, 70, r"(loss|grad[ _]?norm|gnorm)[a-z_'\" ]{0,24}(is|=|:|became)? ?[-+]?(nan|inf)\b|loss became (infinite|nan)|nan loss|non-finite loss",
       "the loss diverged (NaN/Inf): lower LR, check data, use bf16/loss scaling; do not requeue as-is"),
    # A bare metrics row (`76980 nan`: a step, then a value that is NaN/Inf and only numbers after):
    # loggers that print step and loss as columns, without the word loss (DeepXDE brackets each
    # loss term: `2000  [nan]  [nan]  [nan]`).
    _r("metrics-row-nan", NU, 68, r"^[ \t]*[0-9]+[ \t,|]+\[?[-+]?(nan|inf)\b[-+0-9.e \t,|naif\[\]]*$",
       "a printed metrics row turned NaN/Inf: lower the learning rate, check fp16 loss scaling, skip bad batches",
       confidence=0.7),
    # MLPerf's reference implementations stop a run whose quality collapsed and print "MODEL DIVERGED";
    # Tacotron-2/WaveNet's trainers stop on their own check (`Loss exploded to 378655.875 at step`);
    # SciPy's L-BFGS (DeepXDE, TF's ScipyOptimizerInterface) reports `Objective function value: nan`.
    _r("model-diverged", NU, 70, r"\bMODEL DIVERGED\b|\b[Ll]oss exploded\b|Objective function value: [-+]?(nan|inf)\b", "the training diverged (the framework's own check stopped it): lower the learning rate, check the data", caseless=False),
    # torch.distributions' Real() constraint fails only on NaN (it is x == x), and torch.normal refuses
    # a NaN std the same way: an RL policy or a VAE whose outputs went NaN ("Expected parameter loc
    # ... to satisfy the constraint Real(), but found invalid values", "normal expects all elements
    # of std >= 0.0"); kohya's `NaN detected in latents` (an fp16 VAE).
    _r("nan-detected", NU, 69, r"to satisfy the constraint Real\(\), but found invalid values|normal expects all elements of std >= 0\.0|NaN detected in\b|found (a )?NaN|returned nan values|(coordinate|coordinates|position|positions|velocity|velocities|energy) (is|are|became) nan\b|tensor\(\[+nan, nan, nan|Nan in summary histogram|NaN or Inf found|contains NaN|isnan|Detected (NaN|inf)|nan values in|Encountered (a )?NaN|(loss|gradients?) (is|are|became) (not finite|non-finite)|non-finite (loss|gradient)|ignored a value of (nan|inf)\b",
       "NaN/Inf values in the model: the run diverged; fix before requeueing"),
    _r("loss-scale-collapse", NU, 70, r"loss scale already at minimum|cannot decrease scale anymore|Minimum loss scale reached",
       "fp16 loss scale collapsed (gradients overflow every step): lower LR or use bf16; do not requeue as-is"),
    # A skipped fp16 step is routine in healthy runs: it only names the cause over a bare traceback.
    _r("grad-overflow", NU, 31, r"Grad(ient)? overflow|overflow detected[.,] (setting loss scale|Skipping step)|reducing (dynamic )?loss scale (from [0-9.e+-]+ )?to|OVERFLOW! (Rank [0-9]+ )?Skipping step",
       "fp16 gradient overflows: if the run died of them, lower LR or use bf16", confidence=0.45, routine=True),
    # A molecular-dynamics system blowing up is the simulation's own divergence (GROMACS user guide,
    # "Blowing up"; LAMMPS error docs, "Lost atoms"; NAMD's margin violations and "atoms moving too
    # fast"; Tinker's illegal energy value): unstable input or time step, not the machine.
    # numpy's floating-point warnings (np.seterr's default "warn"): a NaN/Inf met in a cast or an
    # operation. Healthy runs print them too, so only over a bare traceback or nothing.
    _r("numpy-fp-warning", NU, 31, r"RuntimeWarning: (invalid value|overflow|divide by zero) encountered in",
       "numpy met NaN/Inf values (invalid value / overflow in an operation): check the inputs and the precision (fp16 overflows)",
       confidence=0.45, routine=True),
    _r("md-system-blew-up", NU, 70, r"Lost atoms: original [0-9]+ current [0-9]+|Too many LINCS warnings|\bLINCS WARNING\b|SETTLE (warning|error)|moved more than the distance allowed by the domain decomposition|Non-numeric atom coords|Out of range atoms - cannot compute|Bond atoms? missing|Periodic cell has become too small for original patch grid|margin violations|atoms moving too fast|simulation has become unstable|Illegal Value for the Total Potential Energy|moved too much since last neighbor list update",
       "the simulated system blew up (atoms lost or constraints failing): smaller time step, re-equilibrate or fix the input; do not requeue as-is"),
    # A CFD solver's divergence: OpenFOAM traps floating-point exceptions (FOAM_SIGFPE) and prints
    # its sigFpe handler in the stack, and its continuity error (about 1e-8 in a sound run) grows
    # past 1e3 before that; Fluent names the diverging AMG solve.
    # An ocean/climate model's own stability check tripping: NEMO's stp_ctl stops the run when sea
    # surface height, velocity or salinity leave their bounds or go NaN (NEMO stpctl.F90), MOM6 warns
    # of an extreme surface state before it aborts (MOM.F90).
    _r("ocean-model-blew-up", NU, 70, r"stp_ctl: \|ssh\| > |Extreme surface sfc_state detected",
       "the ocean model's state left its bounds (a numerical blow-up): smaller time step or check the forcing/initial state; do not requeue as-is"),
    _r("cfd-solver-diverged", NU, 70, r"Foam::sigFpe::sigHandler|Divergence detected in AMG solver|time step continuity errors : sum local = [0-9.]+e\+0*([3-9]|[1-9][0-9])\b",
       "the flow solver diverged (a floating-point trap in the solve): smaller time step / Courant number or fix the case; do not requeue as-is"),
    _r("py-FloatingPointError", NU, 70, r"FloatingPointError", "floating point error: the run diverged", caseless=False),
    # --- Preemption and cancellation -------------------------------------------------------------
    # Slurm's own words are upper case; a framework's lower-case guess is the weaker row below.
    _r("slurm-preempted", PR, 55, r"DUE TO PREEMPTION|\bPREEMPTED\b|[Pp]reempted to accommodate|reason: Preempted",
       "the job was preempted: requeue it (it did nothing wrong)", caseless=False),
    # LSF's exit reason and Kubernetes' scheduler event name the preemption themselves.
    # HTCondor's user log: event 004 (evicted from its slot) and 024 (the execute host lost the
    # job; it is rescheduled). Opportunistic pools (OSG) reclaim slots this way.
    _r("condor-evicted", PR, 54, r"\bJob was evicted\b|Job reconnection failed|Can not reconnect to slot[^\n]{0,160}rescheduling job",
       "HTCondor evicted the job from its slot (reclaimed or lost): it is rescheduled; checkpoint to lose less"),
    # Kubernetes' own reason for a pod evicted for a higher-priority one: PreemptionByScheduler.
    # OpenPBS's scheduler logs its choice (`Simulation: preempting job`) and the method (`Job preempted
    # by suspension` / `requeuing`), which tracejob shows.
    _r("scheduler-preempted", PR, 55, r"TERM_PREEMPT|Job preempted by (suspension|checkpointing|requeuing|deletion)|Simulation: preempting job|PreemptionError|PreemptionByScheduler|preempting to accommodate a higher priority pod|Preempted by [^\n ]+ on node|Reason: +Preempting|(nodes?|instances?|VMs?)( of this job)? (got|were|was|have been|has been) pre-empted|received pre-emption (warning|notice|signal)|(pod|pods|workload|trial|replica)s? (was|were|has been|is being) preempted",
       "the scheduler preempted the job for higher-priority work: requeue it (it did nothing wrong)"),
    _r("launcher-reports-preemption", PR, 50,
       r"this job (is|was|has been) preempted|\b(job|session|task|run)( [0-9._]+| or session)? (was|has been) (manually |automatically )?preempted|received (a )?preemption (notice|signal)",
       "the launcher says the job was preempted: requeue it (if it was near its time limit, that is the cause)"),
    _r("spot-reclaimed", PR, 54, r"spot (instance |VM )?(interruption|termination|terminated|reclaim|eviction)|(instance|node|VM|machine|cluster) (is|was|has been|is being) (preempted|reclaimed)|compute\.instances\.preempted|Host EC2 (\(instance [^\n)]{1,40}\) )?terminated|termination is imminent|terminated in response to (imminent )?node shutdown|Node is shutting|NodeShutdown|Evicted",
       "the node was reclaimed/evicted: requeue"),
    # A node's death explained as a preemption ("the actor's node was preempted") is the preemption.
    _r("node-preempted", PR, 91, r"(actor's|worker's|task's|its|this) node (was|has been) preempted",
       "the node was preempted (reclaimed or drained): requeue"),
    # submitit decides itself whether a signal was the time limit or a preemption, and says so.
    _r("submitit-not-timed-out", PR, 57, r"Job has not timed out\. Ran [0-9]+ minutes",
       "submitit saw the signal before the time limit: the job was preempted; requeue"),
    _r("slurm-requeued", PR, 52, r"DUE TO JOB REQUEUE",
       "the job was requeued (by the scheduler, an admin or its own launcher): it will run again"),
    _r("slurm-cancelled", PR, 45, r"\*\*\* JOB [0-9._+]+ ON [^\n]{0,80}CANCELLED AT",
       "the job was cancelled (by a user or admin): nothing to fix unless unexpected"),
    # A step cancelled is either cancelled from outside (scancel, a preemption: the kill of its
    # tasks follows) or srun ending the step because one of its tasks crashed first (srun
    # --kill-on-bad-exit, "_step_signal: Terminating StepId=..."). So it sits above the kill that
    # follows a cancel (sigkill 33, a bare `Killed` 22) and below the crash signals and CUDA/HIP
    # errors (40+) that make srun cancel a step.
    _r("slurm-step-cancelled", PR, 34, r"\*\*\* STEP [0-9._+a-z]+ ON [^\n]{0,80}CANCELLED AT",
       "a job step was cancelled (scancel, a preemption, or srun ending the step after one of its tasks "
       "failed): read the first failing task's output", confidence=0.6, consequence=True),
    _r("scheduler-owner-cancelled", PR, 45, r"TERM_OWNER|TERM_FORCE_OWNER|TERM_FORCE_ADMIN|job killed by owner",
       "the job was killed by its owner or an admin (LSF): nothing to fix unless unexpected"),
    _r("sigterm-received", PR, 21, r"Received SIGTERM|SIGTERM death signal|received signal 15|Terminated by signal 15",
       "the job was asked to stop (SIGTERM): usually a cancel, preemption or time limit", confidence=0.5),
    # --- Time limit ------------------------------------------------------------------------------
    _r("slurm-time-limit", TL, 56, r"DUE TO TIME LIMIT|TIME LIMIT \*\*\*|TIMEOUT\b[^\n]{0,40}(time limit|walltime)",
       "the job hit its time limit: " + MORE_TIME),
    _r("submitit-timed-out", TL, 57, r"Job has timed out\. Ran [0-9]+ minutes",
       "the job used its whole time limit: " + MORE_TIME),
    # seff's summary says `State: TIMEOUT (exit code 0)`.
    _r("slurm-state-timeout", TL, 56, r"JobState=TIMEOUT\b|State=TIMEOUT\b| TIMEOUT +[0-9]+:[0-9]+|\bjobstate=TIMEOUT\b|\bState: TIMEOUT \(exit code|SLURM status is: 'TIMEOUT'",
       "Slurm ended the job at its time limit: " + MORE_TIME, caseless=False),
    _r("walltime-exceeded", TL, 56, r"walltime [0-9:]+ exceeded limit|TERM_RUNLIMIT|qmaster enforced h_rt|exceeded (its |the )?(job |maximum )?(time|wall ?clock|wall ?time|run ?time|running time|run) limit|(wall ?clock|wall ?time|run ?time|time) limit (exceeded|reached)|due to (the )?(wall ?clock|wall ?time|time) limit|DeadlineExceeded|activeDeadlineSeconds|was active (on the node )?longer than (the )?specified deadline|exceeded (hard|soft) wallclock|resource allocation expired",
       "the job hit its time limit: " + MORE_TIME),
    # Exit status 140 is 128 + SIGUSR2, the signal LSF sends a job at its RUNLIMIT before SIGKILL
    # (Platform LSF Reference, bqueues: RUNLIMIT); workflow managers print the task's status as is.
    _r("exit-140-run-limit", TL, 50, r"terminated with an error exit status \(140\)|Exited with exit code 140\.",
       "exit status 140 (128 + SIGUSR2) is how LSF ends a job at its run limit: " + MORE_TIME, confidence=0.6),
    # SIGUSR1/2 reach a Slurm job only when it asked for them (`--signal=USR1@90`), as the warning
    # before its time limit; a preemption says DUE TO PREEMPTION (55) instead, so that beats this.
    _r("time-limit-warning-signal", TL, 53,
       r"(caught|received|got|handling)( the)?( auto-requeue)? signal:? ?(SIG)?USR[12]\b|received SIGUSR[12]\b|\bSIGUSR[12]\b[^\n]{0,60}re-?queu|this job is timed-out",
       "the job got its time-limit warning signal and stopped or requeued itself: " + MORE_TIME),
    # --- Software bugs ---------------------------------------------------------------------------
    # The device assert's own line (`file.cu:975: kernel: block: [120,0,0], thread: [24,0,0]
    # Assertion ...`) names the CUDA kernel's assert even when the expression wraps onto the next line.
    _r("cuda-device-assert", SW, 47, r"device-side assert(ion)? triggered|ERROR: GPU Kernel Exception|Assertion `[^\n]{1,200}` failed|block: \[[0-9]+,[0-9]+,[0-9]+\], thread: \[[0-9]+,[0-9]+,[0-9]+\] Assertion",
       "a CUDA kernel assert fired (often labels/indices out of range): " + USER),
    _r("cuda-unspecified-launch-failure", SW, 44, r"unspecified launch failure|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED",
       "a kernel crashed on the GPU: a bug unless the node's kernel log shows an Xid", confidence=0.55),
    # CUDA's catch-all (cudaErrorUnknown = 999, "unknown error"): as often a GPU that faulted as a
    # bug, so it says so (classifiers.ambiguity settles it from the node's kernel log).
    _r("cuda-error-unknown", SW, 44, r"Cuda failure (999|'unknown error')|cudaErrorUnknown|CUDA_ERROR_UNKNOWN|CUDA error: unknown error|cuda runtime error \((30|999)\) : unknown error",
       "CUDA reported an unknown error (999): GPU or code; an Xid in the node's kernel log means the GPU",
       confidence=0.5),
    _r("cuda-illegal-memory-access", SW, 44, r"illegal memory access was encountered|CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress|misaligned address|illegal instruction was encountered",
       "illegal GPU memory access (bug in a kernel or extension; hardware if it recurs on one node)",
       confidence=0.7),
    # ROCm's report of a GPU page fault (HSA runtime: `Memory access fault by GPU node-N on address
    # ...`): CUDA's illegal address on AMD, a kernel's bad pointer or the driver stack under it.
    _r("gpu-memory-access-fault", SW, 44, r"Memory access fault by GPU node-[0-9]+",
       "the GPU faulted on an address its kernel may not touch: a pointer bug (a host pointer passed to the device) or the ROCm driver stack; a failing GPU check on the node means the card", confidence=0.7),
    # A compiler that crashed on the job's graph or extension (neuronx-cc's "Internal Compiler Error",
    # gcc's `internal compiler error: in ..., at ...`): a bug in the compiler to report with the input.
    # Not `internal compiler error: Killed`, the OOM killer's (launcher-child-sigkilled).
    _r("compiler-internal-error", SW, 44, r"An Internal Compiler Error has occurred|\bCompilerInternalError\b|internal compiler error: (in [A-Za-z_0-9]+, at |Segmentation fault)",
       "the compiler crashed on this graph/source (internal compiler error): report it with the input; try another compiler version or a smaller graph"),
    # A library refusing a keyword it does not take is, in a job that ran before or follows an example,
    # an API from another version of that library than the code was written for (a moved nightly, an
    # upstream package instead of the project's fork). Less sure than a version check's own words.
    _r("unexpected-keyword-argument", EN, 46, r"TypeError[:(][^\n]{0,160}got an unexpected keyword argument",
       "the code passes an argument the installed library does not take: it was written for another version of "
       "that library; install the version (or fork) the code expects", confidence=0.6),
    _r("py-{1}", SW, 45,
       r"\b(ZeroDivisionError|KeyError|IndexError|TypeError|ValueError|AttributeError|NameError|AssertionError|NotImplementedError|UnboundLocalError|RecursionError|FileNotFoundError|PermissionError|IsADirectoryError|JSONDecodeError|UnicodeDecodeError|SyntaxError|IndentationError|StopIteration|OverflowError|LookupError)\b(: |:$|$)",
       USER, caseless=False),
    _r("nccl-invalid-usage", SW, 44, r"ncclInvalidUsage|NCCL error[^\n]{0,120}invalid usage",
       "NCCL was called wrongly (mismatched collectives, duplicate GPU per rank): " + USER),
    # BLAS/LAPACK's argument check (xerbla; cuBLAS and MKL word it the same): a routine was
    # handed an invalid size or leading dimension, i.e. the calling code (or framework) is wrong.
    _r("blas-illegal-argument", SW, 44, r"On entry to [A-Za-z_0-9]+ +parameter number [0-9]+ had an illegal value|Parameter [0-9]+ was incorrect on entry to [A-Za-z_0-9]+",
       "a BLAS/LAPACK routine got an invalid argument (a size or leading dimension): a bug in the calling code or framework"),
    _r("shape-mismatch", SW, 44, r"size mismatch|shape mismatch|Expected all tensors to be on the same device|mat1 and mat2 shapes cannot be multiplied|must match the size of tensor",
       USER),
    # HIP (ROCm) runtime calls failing, as CUDA's below (`hipMemsetAsync() failed (error code =
    # HIP:1)`, `hipErrorIllegalAddress`); out of memory and missing GPU code objects have rows of
    # their own above.
    _r("hip-error", SW, 42, r"\bhip[A-Z][A-Za-z]*\(\) failed|\bhipError[A-Z][A-Za-z]+|HIP error: ",
       "a HIP (ROCm) runtime call failed: a bug in the code or the runtime unless the node's kernel log shows an amdgpu fault",
       confidence=0.6, caseless=False),
    _r("cuda-error", SW, 42, r"CUDA error: |CUDA_ERROR_|cudaError|CUBLAS_STATUS_|CUDNN_STATUS_|unhandled cuda error",
       "a CUDA call failed: read the error; hardware only if it repeats on one node", confidence=0.6),
    _r("py-{1}", SW, 31, r"\b([A-Z][A-Za-z0-9_]*(Error|Exception)): ", USER, caseless=False, confidence=0.7),
    # WRF/MPAS's wrf_error_fatal banner: the model stopped on its own check (a bad namelist value,
    # an input it cannot read, a CFL violation); the message under it says which, so a row that
    # names a cause on it wins.
    _r("wrf-fatal-called", SW, 30, r"FATAL CALLED FROM FILE:|-{5,} FATAL CALLED -{5,}",
       "the model stopped on its own fatal check: read the message under the banner (often the namelist or an input file)",
       confidence=0.6, caseless=False),
    _r("py-traceback", SW, 30, r"Traceback \(most recent call last\)", USER, confidence=0.6, caseless=False),
    # Open MPI's default error handler firing: an MPI call returned an error and the job aborts
    # (MPI standard, MPI_ERRORS_ARE_FATAL); MPICH (and Cray MPICH) print theirs as `Fatal error in
    # PMPI_Send: Other MPI error, error stack:`. It is what makes srun cancel the step (34), so it
    # sits above that; any named cause printed before it (a fabric or memory row) still wins.
    _r("mpi-errors-are-fatal", SW, 36, r"MPI_ERRORS_ARE_FATAL|\*\*\* An error occurred in MPI_[A-Za-z_]+|Fatal error in P?MPI_[A-Za-z_]+: ",
       "an MPI call failed and the job aborted: the lines before it say why (a peer it could not reach, a bad argument)",
       confidence=0.5, caseless=False),
    # A program's own error report with its source location (IOR `(aiori-POSIX.c:219)`) or its own
    # abort routine (Charm++ CmiAbort, MPI_Abort called by the application): a check in the code
    # failed; weaker than any named cause it may print first.
    _r("app-error-at-source", SW, 28, r"^[ \t>]*(ERROR|FATAL|Error)[: ][^\n]{0,300}\([A-Za-z0-9_./-]+\.(c|cc|cpp|cxx|cu|f|f90|F90):[0-9]+\)|Called CmiAbort|MPI_ABORT was invoked|calling MPI_Abort|application called MPI_Abort\(|\bPMPI_Abort\b|\] Error: Aborted from ",
       "the program stopped on its own error check: read its message (a bug, or an option the build does not support)",
       confidence=0.5, caseless=False),
    # std::terminate calls abort(): an uncaught C++ exception is what the SIGABRT after it reports,
    # so it sits one point above the explicit signal rows (40).
    _r("cpp-exception", SW, 41, r"terminate called after throwing an instance of|what\(\): ",
       "an uncaught C++ exception: read the what() line", confidence=0.6),
    # A glog/absl CHECK (TensorFlow, XLA, Caffe, MXNet) that fails logs `F... file.cc:N] Check failed:`
    # and then aborts: the SIGABRT after it is its report, so like an uncaught exception it sits
    # above the signal rows; a CUDA error named in the check (ECC, driver) has its own, higher row.
    _r("fatal-check-failed", SW, 41, r"\] Check failed: |\*\*\* Check failure stack trace: \*\*\*",
       "a fatal internal check (glog/absl CHECK) failed: read its condition; a CUDA error in it points at the device or driver", confidence=0.6),
    # --- Crash signals (no clearer cause) --------------------------------------------------------
    # Exit status 128+N is a shell's (and LSF's, `Exited with exit code 139.`) report of death by
    # signal N (bash(1), EXIT STATUS): 134 SIGABRT, 135 SIGBUS, 139 SIGSEGV.
    _r("sigsegv", SIGNALS[11].cause, 42, r"Segmentation fault|SIGSEGV|signal 11\b|Signal 11 |WTERMSIG 11\b|exitcode *: *-11\b|return ?code *[=:]? *-11\b|segfault|exit(ed with exit)? (code|status) 139\b|段错误|Speicherzugriffsfehler|Erreur de segmentation|Violación de segmento|セグメンテーション違反|Ошибка сегментирования",
       SIGNALS[11].hint),
    _r("sigabrt", SIGNALS[6].cause, 40, r"SIGABRT|Abort trap\b|WTERMSIG 6\b|signal 6 \(Aborted\)|died from signal 6\b|Fatal Python error: Aborted|Aborted \(core dumped\)|exitcode *: *-6\b|return ?code *[=:]? *-6\b|exit(ed with exit)? (code|status) 134\b",
       SIGNALS[6].hint),
    _r("heap-corruption", CS, 42, r"double free or corruption|free\(\): invalid|malloc\(\): |corrupted size vs\. prev_size|stack smashing detected",
       "native heap corruption: suspect a C/C++ extension; get a core dump"),
    # Cause and hint of each signal come from signal_meaning.py, shared with the scheduler's signal
    # facts. SIGBUS is shared memory (host_oom) and SIGILL a binary built for another CPU
    # (environment), both at crash-signal priority so a named cause printed with them still wins.
    _r("sigbus", SIGNALS[7].cause, 40, r"Bus error|SIGBUS|exitcode *: *-7\b|return ?code *[=:]? *-7\b|exit(ed with exit)? (code|status) 135\b|总线错误|Bus-Zugriffsfehler", SIGNALS[7].hint),
    _r("sigill", SIGNALS[4].cause, 40, r"Illegal instruction|SIGILL", SIGNALS[4].hint),
    _r("fatal-python-error", CS, 39, r"Fatal Python error", "the interpreter crashed: read the faulthandler trace"),
    # Not `\bSIGKILL\b`: torchrun's "Sending process N closing signal SIGKILL" to healthy peers
    # would outrank the real error.
    _r("sigkill", SIGNALS[9].cause, 33, r"(terminated|killed|died) (with|by) (signal )?SIGKILL|received SIGKILL|SIGKILL received|Signals\.SIGKILL|Signal 9 |signal 9\b|WTERMSIG 9\b|exitcode +: *-9\b",
       SIGNALS[9].hint),
    _r("core-dumped", CS, 25, r"core dumped", "the process crashed and dumped core"),
    _r("child-failed", CS, 20, r"ChildFailedError|terminated with signal|died with <Signals|exited with (signal|code)",
       "a worker process died: read the first failing rank's log", confidence=0.5),
    # --- Success ---------------------------------------------------------------------------------
    # Also a test program's own pass verdict: CUDA samples (`Result = PASS`), TensorRT's `&&&& PASSED`.
    _r("training-complete", OK, 5, r"'train_runtime': [0-9]|Successful completion of (geogrid|ungrib|metgrid|real|wrf)|SUCCESS COMPLETE (WRF|REAL_EM)|(program|training|job|run|script|process|simulation) (ended|finished|completed|exited) successfully|training (job )?(is )?(complete|completed|finished|done)\b|finished training|Saving final model|all done\b|(job|run) completed successfully|Engine run complete|End of (run|simulation)\b|EXIT_CODE=0\b|exited with (exit )?code 0\b|\*\*\*\*\* train metrics \*\*\*\*\*|Training finished|wandb: Synced [0-9]+ W&B file|`?Trainer\.fit`? stopped: `?max_(epochs|steps)=[0-9]+`? reached|^Result = PASS\b|&&&& PASSED\b|done training in [0-9.]+ seconds|Pipeline completed successfully\b| of [0-9]+ steps \(100%\) done|workflow finished with status 'Succeeded'",
       "the job finished normally", confidence=0.7),
    # MLPerf's logger (mlperf_logging, MLLOG lines): `run_stop` with status success is the benchmark's
    # own verdict that the run reached its target, and a rank's closing `"key": "status", "value":
    # "success"` says the same. The run is over: teardown errors printed after it (an NCCL watchdog
    # at shutdown, a finaliser's traceback, an NFS handle gone stale in atexit, a cancel a second
    # after the result) do not undo it; hardware and memory faults after it still win (decide.py).
    _r("run-stop-success", OK, 5, r"\"key\": \"run_stop\"[^\n]{0,200}\"status\": \"success\"|\"key\": \"status\", \"value\": \"success\"",
       "the benchmark logged run_stop with status success", confidence=0.7, ends_run=True),
    # Slurm's own words for a clean end (sacct / scontrol / seff / a site's summary line): COMPLETED, 0:0.
    _r("slurm-state-completed", OK, 5, r"JobState=COMPLETED\b|\bCOMPLETED,?( +exit(code)?:?| +ExitCode=)? *0:0\b|\bState: COMPLETED \(exit code 0\)",
       "Slurm says the job completed with exit code 0", confidence=0.7, caseless=False),
    # PyTorch >= 2.4 warns at exit when the job never called destroy_process_group: printed as the
    # processes end, after a good run as after a bad one, so it is success only when nothing failed.
    _r("pg-not-destroyed-at-exit", OK, 4, r"process group has NOT been destroyed before (it is being destructed|we destruct)|destroy_process_group\(\) was not called before program exit",
       "the processes exited (PyTorch's warning at exit); nothing in the log says they failed", confidence=0.5),
    # Open MPI >= 4 leaves InfiniBand to UCX and its unused openib BTL still probes the HCA at start:
    # these warnings are harmless when UCX carries the traffic (Open MPI FAQ, openib BTL), so they
    # are success only when nothing failed.
    _r("openmpi-openib-warning", OK, 4, r"There was an error initializing an OpenFabrics device|The intent is to use UCX for these devices|btl_openib_allow_ib",
       "Open MPI's start-up warning about its unused openib BTL (UCX carries InfiniBand): harmless; nothing in the log says the job failed", confidence=0.45),
    # transformers' model-loading report (modeling_utils): a head that is new or a checkpoint tensor
    # the architecture does not use is printed at every fine-tuning start; harmless on its own.
    _r("hf-weights-load-report", OK, 4, r"Some weights of [^\n]{1,200} were not (initialized from the model checkpoint|used when initializing)|You should probably TRAIN this model on a down-stream task",
       "transformers' model-loading report (new or unused weights) is printed at every fine-tuning start: harmless; nothing in the log says the job failed", confidence=0.45),
    # PMIx's own error prints (`PMIX ERROR: PMIX_ERR_NOT_FOUND in file dstore_base.c at line 1567`)
    # in runs that work: ALCF's Aurora known issues say they "can be safely ignored" on one node, and
    # an Open MPI thread found the same with all tests passing. Success only when nothing failed.
    _r("pmix-error-print", OK, 4, r"PMIX ERROR: [A-Z_-]+ in file [^\n ]+ at line [0-9]+",
       "PMIx printed one of its own error lines, which runs that work print too: harmless unless something else failed", confidence=0.4),
    # Launchers' start-up notices printed by every healthy run: torchrun pinning OMP_NUM_THREADS,
    # DeepSpeed saying its own NCCL comms backend is not merged (it uses torch.distributed).
    # c10d's store client tries IPv6 first and warns with errno 97 before it falls back to IPv4.
    _r("launcher-startup-notice", OK, 4, r"Setting OMP_NUM_THREADS environment variable for each process to be 1 in default|NCCL backend in DeepSpeed not yet implemented|\(errno: 97 - Address family not supported by protocol\)",
       "a launcher's routine start-up notice: harmless; nothing in the log says the job failed", confidence=0.45),
    # Serving jobs: a benchmark that printed its summary, a server that came up and listens.
    _r("serving-up", OK, 5, r"# Out of bounds values : 0 OK|(size|bytes) +count +type +redop +root +time +algbw +busbw +#wrong|\"(GET|POST) /v1/[a-z/_]+ HTTP/[0-9.]+\" 200\b|Serving Benchmark Result|Benchmarking summary|Throughput: [0-9.]+ requests/s|Successful requests: +[1-9]|Starting vLLM server on|Application startup complete|The server is fired up and ready",
       "the inference server started / the benchmark finished normally", confidence=0.6),
    # A log that shows training progress and nothing recognisable as a failure.
    # TensorFlow's input queues cancelled when the session closes at the end of training.
    _r("tf-queue-closed-at-exit", OK, 4, r"Skipping cancelled (enqueue|dequeue) attempt with queue not closed",
       "TensorFlow's input queues were cancelled as the session closed (end of training): harmless; nothing in the log says the job failed", confidence=0.45),
    # JAX probing the backends it was not built for at start-up (xla_bridge: the remote TPU driver,
    # ROCm on a CUDA machine): info lines; a missing CUDA backend is another matter and not here.
    _r("jax-backend-probe", OK, 4, r"Unable to initialize backend '(tpu_driver|rocm)'",
       "JAX probing backends this machine does not have: harmless; nothing in the log says the job failed", confidence=0.45),
    # TensorFlow's NUMA notices at start-up (a VM or container without NUMA in sysfs): logged at INFO
    # level (cuda_gpu_executor.cc, pluggable_device_factory.cc), and the device is still created.
    _r("tf-numa-notice", OK, 4, r"successful NUMA node read from SysFS had negative value|Could not identify NUMA node of platform GPU ID|Your kernel may not have been built with NUMA support",
       "TensorFlow's NUMA notices at start-up: harmless; nothing in the log says the job failed", confidence=0.45),
    _r("training-progress", OK, 3, r"\bepoch[ :=\[]*[0-9]+|\bloss[ :=]+[0-9]|\biteration[ :=]+[0-9]+|\bstep[ :=]+[0-9]+",
       "the log shows normal training progress and no failure", confidence=0.4),
)


def rules_by_signature() -> dict[str, Rule]:
    """Signature -> rule, for the remediation policy's hint look-up ('{1}' rows keep the template)."""
    return {rule.signature: rule for rule in RULES}


def grep_ere_patterns() -> list[str]:
    """The rule patterns in POSIX ERE form for `grep -E -i` (used by the throughput benchmark).

    grep is line-based, so the `\\n` exclusions inside bracket expressions are simply dropped.
    """
    return [rule.pattern.replace("[^\\n]", ".").replace("[^\\n", "[^") for rule in RULES]
