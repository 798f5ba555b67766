"""Settings: one pydantic model, from `PITSTOP_*` environment variables and an optional TOML file.

Precedence (highest first): explicit arguments, environment, the TOML file, defaults.
The TOML file is `$PITSTOP_CONFIG`, else `$PITSTOP_HOME/config.toml` when it exists.
Nested sections use `__` in the environment: `PITSTOP_NOTIFY__URLS='["mailto://..."]'`.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


def default_home() -> Path:
    return Path(os.environ.get("PITSTOP_HOME") or Path.home() / ".pitstop").expanduser()


class Mode(StrEnum):
    OBSERVE = "observe"  # decide, record and notify; change nothing
    CANARY = "canary"  # act only on the listed partitions/nodes
    ACT = "act"


class NotifySettings(BaseModel):
    urls: list[str] = Field(default_factory=list, description="apprise URLs for operators")
    timeout_s: float = Field(default=10.0, gt=0, description="hard budget for one notification")
    on_success: bool = False


class WrapperSettings(BaseModel):
    attach_max_file_bytes: int = Field(default=5 * 1024 * 1024, ge=0)
    attach_max_total_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    log_excerpt_bytes: int = Field(default=64 * 1024, ge=1024, description="head+tail kept of a large log")
    stderr_tail_lines: int = Field(default=30, ge=0)
    drain_grace_s: float = Field(
        default=5.0, ge=0, description="after the command exits, how long its pipes are still read"
    )
    classify_timeout_s: float = Field(
        default=120.0, gt=0,
        description="budget for classifying the complete logs after the command ends; on expiry "
        "the verdict comes from the exit status alone",
    )


class SlurmSettings(BaseModel):
    bin_dir: Path | None = Field(default=None, description="where sinfo/scontrol live; PATH if unset")
    conf_path: Path | None = Field(
        default=None, description="slurm.conf to use (sets SLURM_CONF for Slurm's tools)"
    )
    command_timeout_s: float = Field(default=30.0, gt=0)
    cluster_name: str = "default"


class SshSettings(BaseModel):
    user: str | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None
    trust_on_first_use: bool = False
    port: int = 22
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    max_concurrency: int = Field(default=32, ge=1)
    connect_retries: int = Field(default=2, ge=0, description="retries of a failed connect only")
    retry_backoff_s: float = Field(default=0.5, ge=0, description="first retry delay; doubles")
    pool_per_host: int = Field(default=4, ge=0, description="idle connections kept per host")
    pool_max_idle: int = Field(default=4096, ge=0, description="idle connections kept in all (oldest closed first)")
    pool_idle_s: float = Field(
        default=600.0, gt=0, description="an idle connection older than this is closed, not reused"
    )
    max_output_bytes: int = Field(default=1024 * 1024, ge=1024, description="per stream")
    remote_timeout: bool = Field(
        default=True, description="run commands under timeout(1) so an abandoned one dies remotely"
    )
    # logical node name -> "host[:port]" (dev clusters run several nodes on one host)
    addresses: dict[str, str] = Field(default_factory=dict)


class ClassifierSettings(BaseModel):
    site_rules: Path | None = Field(
        default=None,
        description="site rule file (YAML) loaded after the built-in rules; default $PITSTOP_HOME/site-rules.yaml",
    )


class PolicySettings(BaseModel):
    file: Path | None = Field(
        default=None, description="remediation policy YAML; the built-in default when unset"
    )
    # where `canary` mode may act; the run-time setting (`pitstop mode`) can override these
    canary_partitions: list[str] = Field(default_factory=list)
    canary_nodes: list[str] = Field(default_factory=list)


class TriggerSettings(BaseModel):
    """Slurm hooks, the event spool and the Prefect deployments (`pitstop epilog|prolog|up`)."""

    prefect_api_url: str | None = Field(
        default=None, description="Prefect API, e.g. http://127.0.0.1:4200/api; else $PREFECT_API_URL"
    )
    deliver_timeout_s: float = Field(
        default=0.8, gt=0, le=10, description="network budget of one delivery attempt from a hook"
    )
    emit_success: bool = Field(default=False, description="also emit events for jobs that succeeded")
    confirm_success_with_scontrol: bool = Field(
        default=True,
        description="EpilogSlurmctld reports TIMEOUT and scancel as 0:0: ask scontrol (~20 ms)",
    )
    prolog_checks: list[str] = Field(
        default_factory=lambda: _registry_defaults("prolog"),
        description="fast node checks before a job; default: the prolog set of pitstop/node/registry.py",
    )
    prolog_timeout_s: float = Field(default=5.0, gt=0, description="budget for the prolog checks")
    health_sweep_cron: str | None = Field(default=None, description="cron for health_sweep")
    health_sweep_interval_s: int = Field(
        default=3600, ge=60, description="health_sweep interval when no cron is set"
    )
    flush_interval_s: float = Field(default=5.0, gt=0, description="`pitstop up` spool flush loop")
    runner_poll_s: float = Field(default=1.0, gt=0, description="how often served deployments poll")
    fast_lane: bool = Field(
        default=True, description="run event-triggered flows in `pitstop up`'s process (no spawn)"
    )
    fast_lane_workers: int = Field(
        default=16, ge=1, description="flow runs the fast lane runs at once (a paused run holds one)"
    )
    fast_lane_poll_s: float = Field(default=0.25, gt=0, description="how often the fast lane polls")
    server_port: int = Field(default=4200, ge=1, le=65535, description="local server of `pitstop up`")
    spool_keep_sent: int = Field(default=1000, ge=0, description="delivered events kept for audit")
    # Reconciliation (deployments/reconcile.py): Prefect's automation is the fast path; this
    # catches what it dropped (503 / "database is locked" in a burst) and runs that died.
    reconcile_interval_s: float = Field(
        default=60.0, ge=0, description="`pitstop up`'s reconciliation pass every N s; 0 turns the loop off"
    )
    reconcile_lookback_s: float = Field(
        default=6 * 3600.0, gt=0,
        description="events this old are still checked for a missing run (must exceed grace + interval)",
    )
    reconcile_grace_s: float = Field(
        default=120.0, ge=0, description="events (and run states) younger than this are left to the automation"
    )
    reconcile_stale_s: float = Field(
        default=600.0, gt=0, description="a running flow run with no incident after this long has died"
    )
    reconcile_max_attempts: int = Field(
        default=5, ge=1, description="flow runs per event or incident before reconciliation reports it instead"
    )

    @model_validator(mode="after")
    def _lookback_covers_a_pass(self) -> "TriggerSettings":
        # An event must still be inside the window at the first pass after its grace ends.
        needed = self.reconcile_grace_s + self.reconcile_interval_s
        if self.reconcile_lookback_s <= needed:
            raise ValueError(f"triggers.reconcile_lookback_s ({self.reconcile_lookback_s:g}) must exceed "
                             f"reconcile_grace_s + reconcile_interval_s ({needed:g}), or events are never checked")
        return self


class MountThreshold(BaseModel):
    """A filesystem a node needs, with its own free-space limits (percent of the filesystem)."""

    path: Path
    warn_free_pct: float = Field(default=10.0, ge=0, le=100)
    fail_free_pct: float = Field(default=5.0, ge=0, le=100)
    warn_free_inodes_pct: float = Field(default=10.0, ge=0, le=100)
    fail_free_inodes_pct: float = Field(default=5.0, ge=0, le=100)


class RequiredMount(BaseModel):
    """A filesystem jobs need (NFS, Lustre, GPFS...): it must be mounted and answer in time."""

    path: Path
    fstype: str | None = Field(default=None, description="e.g. nfs4, lustre; None: any type")
    probe_file: Path | None = Field(
        default=None, description="a file on the mount to read too (exercises the data path, not just metadata)"
    )


def _registry_defaults(which: str) -> list[str]:
    # late import: the registry is pure data, and config must not load the node checks
    from pitstop.node import registry

    return registry.prolog_checks() if which == "prolog" else registry.default_checks()


class NodeCheckSettings(BaseModel):
    """`pitstop node-check`: local health checks of one node (NVML, Xid, InfiniBand, disk, DCGM)."""

    checks: list[str] = Field(
        default_factory=lambda: _registry_defaults("default"),
        description="checks run when none are named; default: the default set of pitstop/node/registry.py",
    )
    mounts: list[MountThreshold] = Field(
        default_factory=list, description="filesystems to check; default: / and PITSTOP_HOME's mount"
    )
    gpu_temp_warn_c: int = Field(default=85, gt=0)
    gpu_temp_fail_c: int = Field(default=95, gt=0)
    nvml_event_wait_ms: int = Field(
        default=0, ge=0, le=10_000, description="how long to listen for live Xid events via NVML"
    )
    kernel_log_source: str = Field(default="auto", pattern="^(auto|journalctl|dmesg)$")
    kernel_log_timeout_s: float = Field(default=5.0, gt=0)
    xid_lookback_s: int = Field(
        default=24 * 3600, gt=0, description="how far back the first Xid scan on a node looks"
    )
    xid_watermark_file: Path | None = Field(
        default=None, description="last Xid seen; default $PITSTOP_HOME/node/xid-watermark.json"
    )
    ib_sysfs_root: Path = Path("/sys/class/infiniband")
    ib_expected_rate_gbps: float | None = Field(
        default=None, gt=0, description="ports slower than this are degraded, e.g. 400 for NDR"
    )
    # a counter above its limit is a WARN; counters not listed are reported, not judged
    ib_counter_limits: dict[str, int] = Field(
        default_factory=lambda: {
            "symbol_error": 100,
            "link_downed": 0,
            "port_rcv_errors": 100,
            "link_error_recovery": 10,
            "excessive_buffer_overrun_errors": 0,
            "local_link_integrity_errors": 0,
            "port_xmit_discards": 1000,
        }
    )
    ibstat_path: str = "ibstat"
    dcgmi_path: str = "dcgmi"
    dcgm_level: int = Field(default=1, ge=1, le=4, description="dcgmi diag -r level for prolog use")
    dcgm_timeout_s: float = Field(default=900.0, gt=0)
    tool_timeout_s: float = Field(default=10.0, gt=0, description="budget for ibstat and similar")
    pcie_sysfs_root: Path = Field(
        default=Path("/sys/bus/pci/devices"), description="where the pcie check reads link width/speed"
    )
    pcie_judge_gpu_speed: bool = Field(
        default=False,
        description="also WARN on a GPU link below its top speed (GPUs drop PCIe speed when idle)",
    )
    # checks of issue #16 (pitstop/node/{nvme,ipmi,cpu_mem,mounts,services,gres}.py)
    sysfs_root: Path = Field(default=Path("/sys"), description="sysfs for cpu_mem and nvme (tests: a fake tree)")
    procfs_root: Path = Field(default=Path("/proc"), description="procfs for cpu_mem and mounts")
    nvme_path: str = "nvme"
    smartctl_path: str = "smartctl"
    nvme_media_errors_warn: int = Field(default=0, ge=0, description="WARN above this many media errors")
    nvme_media_errors_fail: int | None = Field(default=None, ge=0, description="FAIL above; None: never")
    nvme_percentage_used_warn: int = Field(default=90, ge=0, le=255, description="WARN at this % of rated life")
    nvme_percentage_used_fail: int | None = Field(
        default=None, ge=0, le=255, description="FAIL at this % of rated life; None: never (100 is not a failure)"
    )
    ipmitool_path: str = "ipmitool"
    ipmi_timeout_s: float = Field(default=30.0, gt=0, description="per ipmitool call; BMCs are slow")
    ipmi_sel_lookback_h: float = Field(default=24.0, gt=0, description="SEL events this recent are reported")
    edac_ce_warn: int = Field(default=100, ge=0, description="WARN above this many correctable errors per memory controller")
    edac_ue_fail: int = Field(default=0, ge=0, description="FAIL above this many uncorrectable errors")
    mce_warn: int = Field(default=0, ge=0, description="WARN above this many machine-check exceptions since boot")
    cpu_governor: str | None = Field(default="performance", description="expected cpufreq governor; None: any")
    required_mounts: list[RequiredMount] = Field(default_factory=list, description="mounts jobs need")
    mount_timeout_s: float = Field(default=3.0, gt=0, le=60, description="a mount slower than this is stale: FAIL")
    required_services: list[str] = Field(
        default_factory=lambda: ["slurmd", "nvidia-persistenced", "nvidia-fabricmanager"],
        description="systemd units that must be active",
    )
    optional_services: list[str] = Field(
        default_factory=lambda: ["nvidia-fabricmanager"],
        description="required only where installed (Fabric Manager exists on NVSwitch systems only)",
    )
    systemctl_path: str = "systemctl"
    scontrol_path: str = "scontrol"
    nvidia_smi_path: str = "nvidia-smi"
    expected_gpus: int | None = Field(default=None, ge=0, description="GPU count to expect; None: the node's Slurm GRES")


class BurnInSettings(BaseModel):
    """Burn-in before a node returns to service: the opt-in `nccl` check (pitstop/node/nccl_tests.py)."""

    all_reduce_perf_path: str = Field(default="all_reduce_perf", description="nccl-tests binary")
    all_reduce_perf_args: list[str] = Field(
        default_factory=lambda: ["-b", "8", "-e", "8G", "-f", "2", "-g", "8"],
        description="single-node sweep, 8 B to 8 GiB on 8 GPUs (nccl-tests README)",
    )
    timeout_s: float = Field(default=900.0, gt=0, description="a run still going after this is a hung collective: FAIL")
    node_type: str | None = Field(
        default=None, description="this node's type (a key of expected_busbw_gbps); None: from its Slurm features"
    )
    expected_busbw_gbps: dict[str, float] = Field(
        default_factory=dict, description='single-node AllReduce bus bandwidth per node type, e.g. {"h100-8": 350}'
    )
    expected_pair_busbw_gbps: dict[str, float] = Field(
        default_factory=dict, description="two-node AllReduce bus bandwidth per node type (the network's figure)"
    )
    min_fraction: float = Field(default=0.85, gt=0, le=1, description="FAIL below this share of the expected figure")


class MetricsSettings(BaseModel):
    """Prometheus `/metrics` of `pitstop up` and `pitstop metrics` (pitstop/metrics/)."""

    enabled: bool = Field(default=True, description="serve /metrics from `pitstop up`")
    bind: str = Field(default="127.0.0.1", description="address /metrics listens on; 0.0.0.0 for a remote Prometheus")
    port: int = Field(default=9478, ge=1, le=65535, description="port of /metrics (not triggers.server_port)")
    source_timeout_s: float = Field(
        default=4.0, gt=0, le=60,
        description="a scrape waits this long for each source (store, spool, cluster, Prefect); a late one reads as down",
    )
    cluster_min_interval_s: float = Field(
        default=15.0, ge=0, description="reuse the scheduler's node list this long, so scrapes do not load slurmctld"
    )
    sweep_lookback_s: float = Field(
        default=6 * 3600.0, gt=0,
        description="nodes count in the sweep gauges by their latest check this recent; cover a few sweep "
        "intervals (each scrape reads every check event in it)",
    )
    latency_buckets_s: list[float] = Field(
        default_factory=lambda: [1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400],
        min_length=1, description="upper bounds of the event-to-action latency histogram",
    )


class StragglerSettings(BaseModel):
    """Silent stragglers in a health sweep (pitstop/node/stragglers.py): GPUs and nodes well
    below the fleet's median, by the modified z-score (Iglewicz & Hoaglin: 0.6745 (x - median) / MAD)."""

    enabled: bool = True
    max_z: float = Field(default=3.5, gt=0, description="|modified z| above this is an outlier (Iglewicz & Hoaglin)")
    min_fleet: int = Field(
        default=8, ge=3, description="fewer comparable GPUs than this: only hard facts flag (a median of 2 says nothing)"
    )
    # The smallest gap from the median that counts, per metric: keeps a tight fleet (MAD near 0)
    # from flagging noise. Ratios are fractions (0.10 = 10 points of the maximum).
    min_gap: dict[str, float] = Field(
        default_factory=lambda: {
            "sm_clock_ratio": 0.10,
            "power_ratio": 0.15,
            "temperature_c": 8.0,
            "nvlink_errors": 100.0,
            "ecc_correctable": 100.0,
        }
    )
    version_majority: float = Field(
        default=0.5, gt=0, lt=1, description="a driver/CUDA version held by more than this share is the fleet's"
    )


class PipelineSettings(BaseModel):
    """The remediation flows (flows/, tasks/) and the demo cluster."""

    approval_timeout_s: int = Field(default=3600, ge=1, description="no answer in time = deny")
    kernel_log_argv: list[str] = Field(
        default_factory=lambda: ["journalctl", "-k", "-o", "short-iso", "--no-pager", "--since", "-6h"],
        description="run on a job's nodes to collect kernel (Xid) lines; {node} is the node's name",
    )
    node_check_argv: list[str] = Field(
        default_factory=lambda: ["pitstop", "node-check", "--json"],
        description="the quick node check run on nodes over SSH; {node} is the node's name",
    )
    node_check_timeout_s: float = Field(default=60.0, gt=0)
    reboot_wait_s: float = Field(
        default=900.0, ge=0,
        description="wait this long for a rebooted node to come back before checking it (0: do not wait)",
    )
    reboot_poll_s: float = Field(default=5.0, gt=0, description="how often the reboot wait looks")
    flight_recorder_dirs: list[Path] = Field(
        default_factory=list,
        description="where jobs leave PyTorch NCCL flight-recorder dumps (besides the job's work dir)",
    )
    sweep_batch_size: int = Field(default=32, ge=1, description="nodes per health_sweep task")
    sweep_parallel_batches: int = Field(default=4, ge=1, description="health_sweep batches checked at once")
    sweep_repeat_failures: int = Field(
        default=3, ge=2, description="failed sweeps within the window that flag a repeat offender"
    )
    sweep_repeat_window_h: float = Field(default=168.0, gt=0, description="repeat-offender window (hours)")
    max_evidence_lines: int = Field(default=12, ge=1, description="evidence lines in a notification")
    demo_dir: Path | None = Field(default=None, description="demo cluster state; $PITSTOP_HOME/demo")
    demo_nodes: int = Field(default=8, ge=2)
    demo_seed: int = 7
    demo_op_delay_s: float = Field(
        default=0.0, ge=0, le=60,
        description="how long each change to the demo cluster takes, like a slow scontrol (tests kill flows mid-action)",
    )
    user_notify_url: str | None = Field(
        default=None,
        description="apprise URL for a job's user; {user} is replaced, e.g. mailtos://...?to={user}@example.org",
    )
    ticket_urls: list[str] = Field(
        default_factory=list,
        description="apprise URLs RMA tickets go to (e.g. json://tickets.example.org/rma for a webhook); empty: notify.urls",
    )
    outbox: bool = Field(default=True, description="also keep each notification as JSON in $PITSTOP_HOME/outbox")


class Settings(BaseSettings):
    """Everything Pitstop can be told. Build with `Settings()`; pass it down, never import a global."""

    model_config = SettingsConfigDict(
        env_prefix="PITSTOP_", env_nested_delimiter="__", extra="ignore"
    )

    home: Path = Field(default_factory=default_home)
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default sqlite:///$PITSTOP_HOME/pitstop.db"
    )
    dry_run: bool = False
    mode: Mode = Mode.OBSERVE
    cluster: str = Field(default="demo", description="cluster backend: slurm | demo")
    notify: NotifySettings = Field(default_factory=NotifySettings)
    wrapper: WrapperSettings = Field(default_factory=WrapperSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)
    node_check: NodeCheckSettings = Field(default_factory=NodeCheckSettings)
    triggers: TriggerSettings = Field(default_factory=TriggerSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    classifier: ClassifierSettings = Field(default_factory=ClassifierSettings)
    stragglers: StragglerSettings = Field(default_factory=StragglerSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    burn_in: BurnInSettings = Field(default_factory=BurnInSettings)

    @model_validator(mode="after")
    def _metrics_port_is_free(self) -> "Settings":
        # Both listen in the same `pitstop up`; the second bind would fail at start.
        if self.metrics.enabled and self.metrics.port == self.triggers.server_port:
            raise ValueError(f"metrics.port ({self.metrics.port}) is the Prefect server's port "
                             "(triggers.server_port): pick another one")
        return self

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def spool_dir(self) -> Path:
        return self.home / "spool"

    @property
    def site_rules_path(self) -> Path:
        """The site's own classifier rules (`pitstop rules`), whether or not the file exists yet."""
        return (self.classifier.site_rules or self.home / "site-rules.yaml").expanduser()

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'pitstop.db'}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = config_file_path()
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)


def config_file_path() -> Path | None:
    explicit = os.environ.get("PITSTOP_CONFIG")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"PITSTOP_CONFIG points to {path}, which is not a readable file")
        return path
    candidate = default_home() / "config.toml"
    return candidate if candidate.is_file() else None


class ConfigError(RuntimeError):
    """Settings that cannot be loaded; the message says which file or variable is wrong."""


def load_settings(**overrides: Any) -> Settings:
    """Load settings, turning pydantic's validation errors into one readable message."""
    from pydantic import ValidationError

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid Pitstop settings ({problems})") from exc
