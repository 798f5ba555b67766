"""SSH sweeps at fleet size: Pitstop's runner (first and pooled sweep) vs ClusterShell's `clush`.

    .venv/bin/python bench/sweep_scale.py [--nodes 100,500,1000] [--repeats 3] [--concurrency 32]
        [--clush-kex curve25519-sha256|default] [--markdown]

Needs the dev cluster's sshd (`scripts/dev-cluster start`) and ClusterShell in the venv
(`.venv/bin/pip install ClusterShell`). N distinct node names `n0000...` all reach that sshd on
127.0.0.1 (`ssh.addresses` for Pitstop, one `Host` block per name in a generated ssh_config for
clush), and each name has its own known_hosts line `[n0000]:2222 ssh-ed25519 ...`, checked for
that name (HostKeyAlias for ssh): a fleet of N hosts as far as both clients can tell, so every
first-sweep connection is a new one with its own key check.

Both run the command `true` with the same concurrency. Each Pitstop repeat is a fresh process
(its first sweep is a first sweep: nothing pooled, known_hosts not yet parsed); it then sweeps
again over its pooled connections. clush has no pool: every sweep is a first sweep. Pitstop runs
`true` under `timeout -k 2 N` (what it does on real nodes); clush runs `true` bare.

Printed per fleet size: wall time (median and min-max over repeats), orchestrator CPU per node
(Pitstop's process; clush with its ssh children), failed nodes, the ratio Pitstop/clush of each
repeat (the two alternate, so each pair shares the machine's load), and at the end a projection
to 2,048 nodes from a straight-line fit and from the growth exponent of the measured curve. The
sshd's own CPU is the same for both and is not counted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROJECT_TO = 2048


# ------------------------------------------------------------------------------ the fleet

def dev_cluster_env() -> dict[str, str]:
    """PITSTOP_SSH__* of the running dev cluster (scripts/dev-cluster env)."""
    status = subprocess.run([str(REPO / "scripts/dev-cluster"), "status"], capture_output=True, text=True)
    if "sshd: up" not in status.stdout:
        raise SystemExit("the dev cluster's sshd is not running: start it with scripts/dev-cluster start")
    out = subprocess.run([str(REPO / "scripts/dev-cluster"), "env"], capture_output=True, text=True).stdout
    env = {}
    for line in out.splitlines():
        parts = shlex.split(line)
        if len(parts) == 2 and parts[0] == "export" and "=" in parts[1]:
            key, value = parts[1].split("=", 1)
            env[key] = value
    return env


def names_for(count: int) -> list[str]:
    return [f"n{i:04d}" for i in range(count)]


def write_fleet(workdir: Path, names: list[str], env: dict[str, str], kex: str) -> tuple[Path, Path]:
    """known_hosts with one line per name, and an ssh_config with one Host block per name."""
    port = env["PITSTOP_SSH__PORT"]
    key_file = Path(env["PITSTOP_SSH__KEY_FILE"])
    host_key = " ".join((key_file.parent / "ssh_host_ed25519_key.pub").read_text().split()[:2])
    known_hosts = workdir / f"known_hosts.{len(names)}"
    known_hosts.write_text("".join(f"[{n}]:{port} {host_key}\n" for n in names))
    blocks = [
        f"Host {n}\n  HostName 127.0.0.1\n  Port {port}\n  User {env['PITSTOP_SSH__USER']}\n"
        f"  IdentityFile {key_file}\n  UserKnownHostsFile {known_hosts}\n  HostKeyAlias [{n}]:{port}\n"
        for n in names
    ]
    common = ["Host *", "  IdentitiesOnly yes", "  GlobalKnownHostsFile /dev/null",
              "  StrictHostKeyChecking yes", "  BatchMode yes", "  CheckHostIP no", "  UpdateHostKeys no"]
    if kex != "default":
        common.append(f"  KexAlgorithms {kex}")
    ssh_config = workdir / f"ssh_config.{len(names)}"
    ssh_config.write_text("".join(blocks) + "\n".join(common) + "\n")
    return known_hosts, ssh_config


# ------------------------------------------------------------------------------ Pitstop

def worker(args: argparse.Namespace) -> int:
    """One fresh Pitstop process: first sweep, then the pooled sweep; prints JSON."""
    import paramiko  # noqa: F401 - loaded before timing: a running `pitstop up` has it already

    from pitstop.cluster.ssh import SshRunner
    from pitstop.config import SshSettings

    env = json.loads(os.environ["SWEEP_ENV"])
    names = names_for(args.worker)
    port = env["PITSTOP_SSH__PORT"]
    settings = SshSettings(
        user=env["PITSTOP_SSH__USER"], key_file=env["PITSTOP_SSH__KEY_FILE"], known_hosts=args.known_hosts,
        port=int(port), addresses={n: f"127.0.0.1:{port}" for n in names},
        max_concurrency=args.concurrency, connect_timeout_s=args.connect_timeout, command_timeout_s=60,
    )
    report = {}
    with SshRunner(settings) as runner:
        report["first"] = _timed_sweep(runner, names, args.command)
        cpu0, t0 = _cpu(), time.monotonic()
        time.sleep(2.0)  # what N idle pooled connections cost while nothing runs
        report["idle_cpu_per_s"] = (_cpu() - cpu0) / (time.monotonic() - t0)
        report["pooled"] = _timed_sweep(runner, names, args.command)
        report["pooled"]["reused"] = runner.idle_connections()
    print(json.dumps(report))
    return 0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _timed_sweep(runner, names: list[str], command: str) -> dict:
    cpu0, t0 = _cpu(), time.monotonic()
    results = runner.fan_out(names, shlex.split(command))
    wall, cpu = time.monotonic() - t0, _cpu() - cpu0
    failed = [r for r in results if r.status != "ok" or r.exit_code != 0]
    sample = (failed[0].error or failed[0].stderr)[:200] if failed else ""
    return {"wall_s": wall, "cpu_s": cpu, "failures": len(failed), "sample": sample}


def pitstop_sweeps(count: int, known_hosts: Path, env: dict[str, str], args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(count), "--known-hosts", str(known_hosts),
           "--concurrency", str(args.concurrency), "--connect-timeout", str(args.connect_timeout),
           "--command", args.command]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SWEEP_ENV": json.dumps(env)})
    if proc.returncode != 0:
        raise SystemExit(f"the Pitstop worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ clush

_CLUSH_FAILURE = re.compile(r"^clush: (\S+): (exited with exit code \d+|.*timeout.*)$", re.M)


def clush_sweep(count: int, ssh_config: Path, args: argparse.Namespace) -> dict:
    from ClusterShell.NodeSet import NodeSet

    clush = shutil.which("clush", path=str(Path(sys.executable).parent)) or shutil.which("clush")
    if clush is None:
        raise SystemExit("clush not found: .venv/bin/pip install ClusterShell")
    nodes = str(NodeSet.fromlist(names_for(count)))
    cmd = [clush, "-S", "-f", str(args.concurrency), "-t", str(args.connect_timeout), "-u", "60",
           "-o", f"-F {ssh_config}", "-w", nodes, args.command]
    with tempfile.TemporaryDirectory() as cfg:  # no site clush.conf: same settings everywhere
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "CLUSTERSHELL_CFGDIR": cfg})
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # clush and the ssh processes it reaped
    failed = NodeSet()
    for match in _CLUSH_FAILURE.finditer(proc.stderr):
        failed.update(match.group(1))
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    sample = proc.stderr.strip().splitlines()[0][:200] if failed else ""
    return {"wall_s": wall, "cpu_s": cpu, "failures": len(failed), "sample": sample}


# ------------------------------------------------------------------------------ report

def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def project(points: list[tuple[int, float]], target: int = PROJECT_TO) -> tuple[float, float, float, float]:
    """(per-node slope, straight-line projection, growth exponent, power-law projection)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    line = my + slope * (target - mx)
    (n0, t0), (n1, t1) = points[0], points[-1]
    exponent = math.log(t1 / t0) / math.log(n1 / n0)
    return slope, line, exponent, t1 * (target / n1) ** exponent


def print_size(count: int, runs: list[dict], markdown: bool) -> None:
    first = [r["pitstop"]["first"] for r in runs]
    pooled = [r["pitstop"]["pooled"] for r in runs]
    clush = [r["clush"] for r in runs]
    rows = [("pitstop first", first), ("pitstop pooled", pooled), ("clush", clush)]
    ratio_first = [p["wall_s"] / c["wall_s"] for p, c in zip(first, clush)]
    ratio_pooled = [p["wall_s"] / c["wall_s"] for p, c in zip(pooled, clush)]
    idle = statistics.median(r["pitstop"]["idle_cpu_per_s"] for r in runs)
    if markdown:
        print(f"| {count:,} | {spread([x['wall_s'] for x in first])} | {spread([x['wall_s'] for x in pooled])} "
              f"| {spread([x['wall_s'] for x in clush])} | {spread(ratio_first)} | {spread(ratio_pooled)} "
              f"| {1000 * statistics.median(x['cpu_s'] for x in first) / count:.1f} "
              f"| {1000 * statistics.median(x['cpu_s'] for x in clush) / count:.1f} "
              f"| {sum(x['failures'] for x in first + pooled)} / {sum(x['failures'] for x in clush)} |")
        return
    for name, sweeps in rows:
        walls = [x["wall_s"] for x in sweeps]
        cpu_ms = [1000 * x["cpu_s"] / count for x in sweeps]
        fails = sum(x["failures"] for x in sweeps)
        sample = next((x["sample"] for x in sweeps if x["sample"]), "")
        print(f"{count:>6,}  {name:15s} wall {spread(walls):22s} s   CPU {spread(cpu_ms, '{:.1f}'):18s} ms/node"
              f"   failures {fails}{'  e.g. ' + sample if sample else ''}")
    print(f"{'':8s}ratio pitstop/clush: first {spread(ratio_first)}, pooled {spread(ratio_pooled)}"
          f"   (idle pool of {count:,}: {idle:.3f} CPU s/s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,500,1000", help="comma list of fleet sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--connect-timeout", type=float, default=10.0)
    parser.add_argument("--command", default="true")
    parser.add_argument("--clush-kex", default="curve25519-sha256",
                        help="KexAlgorithms for clush's ssh ('default': OpenSSH's own choice, slower)")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown rows")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--known-hosts", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    env = dev_cluster_env()
    sizes = [int(n) for n in args.nodes.split(",")]
    ssh_version = subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr.strip()
    print(f"sweep_scale: `{args.command}`, concurrency {args.concurrency}, {args.repeats} repeats, sshd "
          f"127.0.0.1:{env['PITSTOP_SSH__PORT']}, clush's ssh {ssh_version.split(',')[0]} kex {args.clush_kex}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    measured: dict[int, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="pitstop-sweep-") as tmp:
        for count in sizes:
            known_hosts, ssh_config = write_fleet(Path(tmp), names_for(count), env, args.clush_kex)
            runs = []
            for _ in range(args.repeats):
                runs.append({"pitstop": pitstop_sweeps(count, known_hosts, env, args),
                             "clush": clush_sweep(count, ssh_config, args)})
            measured[count] = runs
            print_size(count, runs, markdown=False)
    if args.markdown:
        print("\n| nodes | Pitstop first sweep s | Pitstop pooled s | clush s | first/clush | pooled/clush "
              "| Pitstop CPU ms/node | clush CPU ms/node | failures P / c |")
        print("|---|---|---|---|---|---|---|---|---|")
        for count, runs in measured.items():
            print_size(count, runs, markdown=True)
    if len(sizes) >= 2:
        for label, pick in (("pitstop first", lambda r: r["pitstop"]["first"]), ("clush", lambda r: r["clush"])):
            points = [(n, statistics.median(pick(r)["wall_s"] for r in runs)) for n, runs in measured.items()]
            slope, line, exponent, power = project(points)
            print(f"{label:15s} {PROJECT_TO:,} nodes: {line:.1f} s on the straight-line fit "
                  f"({1000 * slope:.1f} ms/node), {power:.1f} s from the growth exponent {exponent:.2f} "
                  f"(1.00 = linear)")
        print(f"target: first sweep <= 1.0x clush at the largest size, linear growth, {PROJECT_TO:,} projected < 60 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
