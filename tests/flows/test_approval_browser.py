"""The approval form in a real browser: headless Chromium opens the link the notification gives
(the paused run's page in the Prefect UI that the test server serves), reads what the Resume
dialog says, picks "approve", submits, and the RMA ticket is opened.

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


def _approve_in_the_ui(driver, url: str, comment: str) -> str:
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
    modal.find_element(By.CSS_SELECTOR, "textarea").send_keys(comment)
    modal.find_element(By.XPATH, ".//button[normalize-space()='Submit']").click()
    wait.until(EC.invisibility_of_element_located((By.CSS_SELECTOR, ".p-modal")))
    return text


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
            seen["text"] = _approve_in_the_ui(browser, url, "looked at it in the browser")
        except BaseException as exc:  # surfaced by the test thread; deny so the flow ends now
            errors.append(exc)
            try:
                browser.save_screenshot(str(tmp_path / "approval-failure.png"))
            except Exception:
                pass
            if "run_id" in seen:
                try:
                    resume_flow_run(UUID(seen["run_id"]), run_input={"decision": "deny", "comment": "browser failed"})
                except Exception:
                    pass

    thread = threading.Thread(target=approver, name="browser-approver", daemon=True)
    thread.start()
    report = post_failure(rma_case.job_id)
    thread.join(10)
    assert not errors, f"{errors} (screenshot: {tmp_path / 'approval-failure.png'})"

    culprit = rma_case.nodes[0]
    [incident] = rows(Incident)
    text = seen["text"]
    evidence = " ".join(incident.evidence[0]["text"].split())[:60]
    for needle in (f"Approve rma_ticket {culprit}?", f"Node(s): {culprit}", "Cause: gpu_hardware (xid-79)",
                   f"Proposed action: rma_ticket {culprit}", "Needs approval because:", "Deadline:", evidence):
        assert needle in text, f"{needle!r} not on the page:\n{text}"
    # the answer reached the flow: the action ran and the journal says who said yes and why
    [line] = [a for a in report.actions if a.kind == "rma_ticket"]
    assert line.state == "done" and "approved: looked at it in the browser" in line.detail, line
    [record] = [a for a in rows(ActionRecord) if a.kind == "rma_ticket"]
    assert record.state == "done"
    [ticket] = rows(Ticket)
    assert ticket.node == culprit and ticket.incident_id == incident.id
