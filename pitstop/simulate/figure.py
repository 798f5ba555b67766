"""The comparison as one PNG: ETTR per strategy, GPU-hours lost by kind (stacked), and nodes
out of the pool over the run. matplotlib is imported here only, with the file-only Agg backend."""

from __future__ import annotations

from pathlib import Path

from pitstop.simulate.results import LOSS_KINDS, LOSS_LABELS, Comparison

COLORS = ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974")


def write_png(c: Comparison, path: Path | str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    labels = [s.label for s in c.strategies]
    fig, (ax_ettr, ax_lost, ax_out) = plt.subplots(1, 3, figsize=(16, 5.2), gridspec_kw={"width_ratios": [1, 1.3, 1.5]})

    bars = ax_ettr.bar(labels, [s.ettr for s in c.strategies], color="#4c72b0")
    ax_ettr.bar_label(bars, fmt="%.3f")
    ax_ettr.axhline(0.9, color="grey", linestyle="--", linewidth=1)
    ax_ettr.text(len(labels) - 0.5, 0.905, "Llama 3: > 0.90", ha="right", va="bottom", fontsize=8, color="grey")
    ax_ettr.set_ylim(0, 1.05)
    ax_ettr.set_ylabel("ETTR (productive / allocated GPU-hours)")
    ax_ettr.set_title("Effective training time ratio")

    bottom = [0.0] * len(labels)
    for kind, color in zip(LOSS_KINDS, COLORS):
        values = [s.lost_gpu_hours.get(kind, 0.0) / 1e6 for s in c.strategies]
        ax_lost.bar(labels, values, bottom=bottom, color=color, label=LOSS_LABELS[kind])
        bottom = [b + v for b, v in zip(bottom, values)]
    ax_lost.set_ylabel("million GPU-hours lost")
    ax_lost.set_title("GPU-hours lost, by cause")
    ax_lost.legend(fontsize=8)

    for s in c.strategies:
        days = [h / 24 for h in range(len(s.nodes_out_hourly))]
        ax_out.plot(days, s.nodes_out_hourly, label=s.label, linewidth=1)
    ax_out.axhline(c.spare_nodes, color="grey", linestyle="--", linewidth=1)
    ax_out.text(0, c.spare_nodes, " spare nodes", va="bottom", fontsize=8, color="grey")
    ax_out.set_xlabel("day")
    ax_out.set_ylabel("nodes out of the pool")
    ax_out.set_title("Nodes out of the pool over time")
    ax_out.legend(fontsize=8)

    for ax in (ax_ettr, ax_lost):
        ax.tick_params(axis="x", labelsize=8, labelrotation=15)
    fig.suptitle(f"pitstop simulate: {c.days:g} days, {c.gpus:,} GPUs, {c.expected_interruptions:.0f} "
                 f"interruptions expected ({c.source}); policy {c.policy}, seed {c.seed}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
