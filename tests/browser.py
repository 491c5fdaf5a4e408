"""Debian's headless Chromium, driven by selenium through Debian's
chromedriver (no browser download), for the browser tests: the demo page
(tests/serving/test_demo_page.py) and the documentation site
(tests/test_site.py).

scripts/install_browser.sh (run by scripts/test.sh) installs chromium and
chromium-driver with apt-get when they are missing; a test that needs them
is skipped, saying so, only where that was impossible.
"""

from __future__ import annotations

import shutil

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# No sandbox as root, and no background connections (refused on a closed
# network, many at a time).
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-renderer-backgrounding",
    "--disable-background-timer-throttling",
    "--window-size=1200,1400",
]


def start_chromium(tmp_path_factory, log_network: bool = False):
    """A started Chromium driver (the caller quits it), or a skip naming
    what is missing; a browser that is installed but cannot start fails.
    With `log_network`, `driver.get_log("performance")` holds its requests
    (DevTools' Network events)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} missing: Debian's chromium and chromium-driver "
            "could not be installed (scripts/install_browser.sh runs apt-get install)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    if log_network:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as error:  # Installed, but cannot start: a failure.
        pytest.fail(f"Chromium did not start: {error.msg}")
    # Selenium gives up on a chromedriver command after 120 s; on a 2-core
    # machine busy with other jobs one took longer (a starved browser).
    driver.command_executor.client_config.timeout = 600
    return driver
