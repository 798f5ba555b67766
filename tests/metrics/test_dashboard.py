"""docs/grafana/pitstop-dashboard.json: valid JSON, and every query asks only for metrics Pitstop exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.metrics.catalog import METRICS, series_names
from tests.conftest import REPO_ROOT

DASHBOARD = REPO_ROOT / "docs" / "grafana" / "pitstop-dashboard.json"
METRIC_NAME = re.compile(r"\bpitstop_[a-z0-9_]+\b")


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(panels: list[dict]) -> Iterator[dict]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))  # a collapsed row holds its panels


def _queries(dash: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    out = [(f"panel {p['title']!r}", t["expr"]) for p in _panels(dash["panels"]) for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"variable {var['name']!r}", query))
    return out


def test_every_query_uses_only_exported_metrics() -> None:
    exported = series_names()
    queries = _queries(_dashboard())
    assert len(queries) >= 20
    for where, expr in queries:
        names = set(METRIC_NAME.findall(expr))
        assert names, f"{where}: {expr!r} asks for no Pitstop metric"
        assert names <= exported, f"{where}: {sorted(names - exported)} not exported (pitstop/metrics/catalog.py)"


def test_every_exported_metric_is_on_the_dashboard() -> None:
    used = {n for _, expr in _queries(_dashboard()) for n in METRIC_NAME.findall(expr)}
    unused = [m.name for m in METRICS if not any(n.startswith(m.name) for n in used)]
    assert not unused, f"exported but not shown: {unused}"


def test_panels_are_well_formed() -> None:
    dash = _dashboard()
    panels = list(_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"] for v in dash["templating"]["list"]}
    for p in panels:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"].strip("${}") in variables, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for expr in (t["expr"] for t in p["targets"]):
            for var in re.findall(r"\$(\w+)", expr):
                assert var in variables | {"__range", "__interval", "__rate_interval"}, f"{p['title']}: ${var}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel query as a recording rule's expression: a syntax error fails
    here. (Variables use Grafana's label_values(), which is not PromQL.)"""
    panel_queries = [expr for where, expr in _queries(_dashboard()) if where.startswith("panel")]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"pitstop:dashboard_query_{i}", "expr": expr.replace("$cluster", ".*")}
        for i, expr in enumerate(panel_queries)
    ]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
