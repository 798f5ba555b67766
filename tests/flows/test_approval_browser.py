"""The approval form in a real browser: headless Chromium opens the link the notification gives
(the paused run's page in the Prefect UI that the test server serves), reads what the Resume
dialog says, picks "approve", gives a name and a comment, submits, and the RMA ticket is opened;
`pitstop incidents --explain` then shows who approved and why, and the run ends "Approved".
A second run is answered with the page's red Cancel button: denied, and it stops at once.

Needs Debian's `chromium` and `chromium-driver` (scripts/dev-cluster installs them, so CI has
them) and `selenium` (dev extras). Only a missing Chromium skips the test.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from uuid import UUID

import pytest

from pitstop.store.tables import ActionRecord, Incident, Ticket
from tests.flows.conftest import rows, wait_for
from tests.flows.test_approval import RMA_RULE, _approval_notice, wait_for_form

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; "
        "scripts/dev-cluster installs them)",
    ),
]

UI_WAIT_S = 30


@pytest.fixture
def browser(tmp_path: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    # the given driver, never Selenium Manager's download
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(UI_WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def rma_case(prefect_server, demo, use_policy, mailbox):
    use_policy([RMA_RULE])
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    return fault


def _field(modal, label: str):
    """The form field under the label the UI renders from the RunInput's field name."""
    from selenium.webdriver.common.by import By

    return modal.find_element(By.XPATH, ".//div[contains(concat(' ', normalize-space(@class), ' '), ' schema-form-property ')]"
                              f"[.//span[@class='schema-form-property__label' and starts-with(normalize-space(), '{label}')]]"
                              "//textarea")


def _approve_in_the_ui(driver, url: str, name: str, comment: str) -> str:
    """Open the run's page, open Resume, read the dialog's context, approve, submit; the text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(driver, UI_WAIT_S)
    driver.get(url)
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Resume']"))).click()
    modal = wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, ".p-modal")))
    context = wait.until(lambda d: modal.find_element(By.CSS_SELECTOR, ".p-modal__body article.markdown-renderer"))
    wait.until(lambda d: "Deadline" in (context.get_attribute("innerText") or ""))
    text = driver.execute_script("return arguments[0].innerText", context)
    choice = wait.until(lambda d: modal.find_element(
        By.CSS_SELECTOR, "select.p-native-select__control:not(.p-native-select__control--placeholder)"))
    Select(choice).select_by_value("approve")
    _field(modal, "Approver").send_keys(name)
    _field(modal, "Comment").send_keys(comment)
    modal.find_element(By.XPATH, ".//button[normalize-space()='Submit']").click()
    wait.until(EC.invisibility_of_element_located((By.CSS_SELECTOR, ".p-modal")))
    return text


def _cancel_in_the_ui(driver, url: str) -> None:
    """The run page's red Cancel button, then the confirmation dialog's own button."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, UI_WAIT_S)
    driver.get(url)
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Cancel']"))).click()
    modal = wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, ".p-modal")))
    confirm = wait.until(lambda d: modal.find_element(By.CSS_SELECTOR, ".p-modal__footer .p-button--destructive"))
    confirm.click()
    wait.until(EC.invisibility_of_element_located((By.CSS_SELECTOR, ".p-modal")))


def _run_as_deployment(flow, parameters: dict):
    """Run `flow` as a run of a deployment, in this process, the way `pitstop up`'s fast lane
    does: the UI offers Cancel only on runs that belong to a deployment."""
    from prefect.deployments import run_deployment
    from prefect.flow_engine import run_flow

    flow.to_deployment(name="approval-browser-test").apply()
    flow_run = run_deployment(name=f"{flow.name}/approval-browser-test", parameters=parameters, timeout=0)
    return run_flow(flow, flow_run=flow_run, parameters=flow_run.parameters, return_type="state")


def _explain() -> str:
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "incidents", "--explain"],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _dump(browser, tmp_path: Path, name: str) -> None:
    try:
        browser.save_screenshot(str(tmp_path / f"{name}.png"))
        (tmp_path / f"{name}.html").write_text(browser.page_source)
    except Exception:
        pass


def test_approve_in_the_browser_runs_the_action(rma_case, demo, isolated_home, browser, tmp_path, monkeypatch):
    from flows.post_failure import post_failure
    from prefect.flow_runs import resume_flow_run

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "120")
    seen: dict = {}
    errors: list = []

    def approver() -> None:
        try:
            _, url, run_id = wait_for(lambda: _approval_notice(isolated_home), 60, "the approval notification")
            seen["run_id"] = run_id
            wait_for_form(run_id)
            seen["text"] = _approve_in_the_ui(browser, url, "Erin On-Call", "looked at it in the browser")
        except BaseException as exc:  # surfaced by the test thread; deny so the flow ends now
            errors.append(exc)
            _dump(browser, tmp_path, "approval-failure")
            if "run_id" in seen:
                try:
                    resume_flow_run(UUID(seen["run_id"]), run_input={"decision": "deny", "approver": "test",
                                                                     "comment": "browser failed"})
                except Exception:
                    pass

    thread = threading.Thread(target=approver, name="browser-approver", daemon=True)
    thread.start()
    state = post_failure(rma_case.job_id, return_state=True)
    thread.join(10)
    assert not errors, f"{errors} (screenshot: {tmp_path / 'approval-failure.png'})"
    report = state.result()

    culprit = rma_case.nodes[0]
    [incident] = rows(Incident)
    text = seen["text"]
    evidence = " ".join(incident.evidence[0]["text"].split())[:60]
    for needle in (f"Approve rma_ticket {culprit}?", f"Node(s): {culprit}", "Cause: gpu_hardware (xid-79)",
                   f"Proposed action: rma_ticket {culprit}", "Needs approval because:", "Deadline:",
                   f"Already done: drain {culprit}: done", evidence):
        assert needle in text, f"{needle!r} not on the page:\n{text}"
    # the answer reached the flow: the action ran and the journal says who said yes and why
    [line] = [a for a in report.actions if a.kind == "rma_ticket"]
    assert line.state == "done" and "approved by Erin On-Call: looked at it in the browser" in line.detail, line
    [record] = [a for a in rows(ActionRecord) if a.kind == "rma_ticket"]
    assert record.state == "done" and record.result.startswith("approved by Erin On-Call: looked at it"), record.result
    [ticket] = rows(Ticket)
    assert ticket.node == culprit and ticket.incident_id == incident.id
    explain = _explain()
    assert f"rma_ticket {culprit}: done - approved by Erin On-Call: looked at it in the browser" in explain, explain
    # its own end, not a plain "Completed"
    assert state.is_completed() and state.name == "Approved", state


def test_cancel_in_the_browser_denies_and_stops_at_once(rma_case, demo, isolated_home, browser, tmp_path, monkeypatch):
    import time

    from flows.post_failure import post_failure
    from prefect.flow_runs import resume_flow_run

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "120")
    seen: dict = {}
    errors: list = []

    def canceller() -> None:
        try:
            _, url, run_id = wait_for(lambda: _approval_notice(isolated_home), 60, "the approval notification")
            seen["run_id"] = run_id
            wait_for_form(run_id)
            _cancel_in_the_ui(browser, url)
            seen["cancelled_at"] = time.monotonic()
        except BaseException as exc:
            errors.append(exc)
            _dump(browser, tmp_path, "cancel-failure")
            if "run_id" in seen:
                try:
                    resume_flow_run(UUID(seen["run_id"]), run_input={"decision": "deny", "approver": "test"})
                except Exception:
                    pass

    thread = threading.Thread(target=canceller, name="browser-canceller", daemon=True)
    thread.start()
    state = _run_as_deployment(post_failure, {"job_id": rma_case.job_id})
    ended = time.monotonic()
    thread.join(10)
    assert not errors, f"{errors} (page: {tmp_path / 'cancel-failure.html'})"
    assert state.is_cancelled(), state
    assert ended - seen["cancelled_at"] < 15, f"{ended - seen['cancelled_at']:.1f} s from Cancel to the end"
    [record] = [a for a in rows(ActionRecord) if a.kind == "rma_ticket"]
    assert record.state == "denied" and "cancelled" in record.result, record.result
    assert rows(Ticket) == []
    [incident] = rows(Incident)
    assert incident.status == "done"
