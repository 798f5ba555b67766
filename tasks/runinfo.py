"""The current Prefect flow run's id and UI link, for journals and notifications."""

from __future__ import annotations


def current_flow_run() -> tuple[str | None, str | None]:
    """(flow run id, UI URL) or (None, None) outside a flow run or without a UI URL.

    The link is built like Prefect's own "View at ..." log line (`url_for`): the UI's route is
    /runs/flow-run/<id> (prefect.runtime's helper builds /flow-runs/..., which the UI lacks).
    """
    from prefect.runtime import flow_run
    from prefect.utilities.urls import url_for

    run_id = flow_run.get_id()
    if not run_id:
        return None, None
    try:
        url = url_for("flow-run", obj_id=str(run_id))
    except Exception:  # no UI URL configured: the notification says so by omitting the link
        url = None
    return str(run_id), url
