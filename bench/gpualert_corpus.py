"""Turn GPUAlert's published eval corpus into a Pitstop JSONL corpus (text + our cause label).

    .venv/bin/python bench/gpualert_corpus.py [SRC] [OUT.jsonl]
    .venv/bin/pitstop classify --eval OUT.jsonl

SRC defaults to /work/shared/peer-corpora/gpualert-eval (MIT licence, see its LICENSE). Each
injected log starts with an `[inject] mode=...` line that names its label; it is stripped so the
classifier never sees the answer. GPUAlert's 15 classes are finer than ours; MODE_TO_CAUSE is
the mapping. Its `nccl` class mixes watchdog timeouts with transport errors ("unhandled system
error"), both of which our taxonomy splits: rows carry `"accept": ["network_fabric"]` so either counts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT_SRC = Path("/work/shared/peer-corpora/gpualert-eval")

MODE_TO_CAUSE: dict[str, str] = {
    "ram_oom": "host_oom",
    "oom_killer": "host_oom",
    "cuda_oom": "cuda_oom",
    "segfault": "crash_signal",
    "file_not_found": "software_bug",  # a wrong path in the user's code/config
    "permission": "software_bug",  # writing where the job may not: a user error
    "missing_module": "environment",
    "div_zero": "software_bug",
    "traceback": "software_bug",
    "assertion": "software_bug",
    "device_mismatch": "software_bug",
    "cuda_runtime": "software_bug",  # device-side asserts / illegal access in user kernels
    "runtime_error": "environment",  # "CUDA capability sm_90 is not compatible with this build"
    "nan_loss": "numerical",
    "nccl": "nccl_timeout",
}
# Classes where another of our causes is an equally right answer (the row's "accept" field).
ALSO_ACCEPT: dict[str, list[str]] = {"nccl": ["network_fabric"]}


def _strip_inject(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("[inject] "))


def rows(src: Path):
    """(id, mode, path) once per log: labels.jsonl, plus wild excerpts only the TSV lists."""
    corpus = src / "corpus"
    seen: set[str] = set()
    for raw in (corpus / "labels.jsonl").read_text().splitlines():
        if raw.strip():
            meta = json.loads(raw)
            seen.add(meta["id"])
            yield meta["id"], meta["mode"], src / meta["log_path"]
    for raw in (corpus / "wild" / "wild_labels.tsv").read_text().splitlines():
        if raw.strip() and not raw.startswith("#"):
            ident, mode = raw.split("\t")[:2]
            if ident not in seen:
                yield ident, mode, corpus / "wild" / f"{ident}.log"


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_SRC
    out = Path(argv[2]) if len(argv) > 2 else Path("gpualert.jsonl")
    written = 0
    with open(out, "w") as sink:
        for ident, mode, path in rows(src):
            text = _strip_inject(path.read_bytes().decode("utf-8", errors="replace"))
            row = {"id": ident, "label": MODE_TO_CAUSE[mode], "mode": mode, "text": text}
            if mode in ALSO_ACCEPT:
                row["accept"] = ALSO_ACCEPT[mode]
            sink.write(json.dumps(row) + "\n")
            written += 1
    print(f"wrote {written} examples to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
