"""The current Prefect flow run's id and UI link, for journals and notifications."""

from __future__ import annotations


def current_flow_run() -> tuple[str | None, str | None]:
    """(flow run id, UI URL) or (None, None) outside a flow run or without a UI URL."""
    from prefect.runtime import flow_run

    run_id = flow_run.get_id()
    if not run_id:
        return None, None
    url = flow_run.get_flow_run_ui_url() if hasattr(flow_run, "get_flow_run_ui_url") else None
    if not url:
        from prefect.settings import PREFECT_UI_URL

        base = PREFECT_UI_URL.value()
        url = f"{base.rstrip('/')}/runs/flow-run/{run_id}" if base else None
    return str(run_id), url
