"""The demo page in a real browser: Debian's headless Chromium, driven by
selenium through Debian's chromedriver (no browser download), against a
`keras-transformer serve` process on 127.0.0.1.

scripts/test.sh installs chromium and chromium-driver with apt-get when
they are missing; this module is skipped, saying so, only where that was
impossible. Set KERAS_TRANSFORMER_SCREENSHOT=docs/serve-demo.png to keep
the screenshot, and KERAS_TRANSFORMER_DEMO_RUN=RUN_DIR to serve a trained
run instead of the test's untrained one (the README's screenshot: the
`small` Multi30k run).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.serving.client import ServerProcess, make_run

webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = pytest.mark.slow

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# The machine notes' flags: no sandbox as root, and no background
# connections (refused on a closed network, many at a time).
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
SENTENCE = "A man in a blue shirt is playing the guitar on the street."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    run, flags = os.environ.get("KERAS_TRANSFORMER_DEMO_RUN"), []
    if run is None:  # Untrained: its outputs run to the limit; keep it short.
        run = make_run(tmp_path_factory.mktemp("demo") / "run")
        flags = ["--max-extra-length", "8"]
    log = tmp_path_factory.mktemp("logs") / "server.log"
    process = ServerProcess(["--run-dir", str(run), *flags], log)
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} missing: Debian's chromium and chromium-driver "
            "could not be installed (scripts/test.sh runs apt-get install)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as error:  # Installed, but cannot start: a failure.
        pytest.fail(f"Chromium did not start: {error.msg}")
    # Selenium gives up on a chromedriver command after 120 s; on a 2-core
    # machine busy with other jobs one took longer (a starved browser).
    driver.command_executor.client_config.timeout = 600
    yield driver
    driver.quit()


def test_type_translate_and_see_the_n_best_and_the_attention(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    find = browser.find_element
    browser.get(f"http://127.0.0.1:{server.port}/")
    wait = WebDriverWait(browser, 300)
    wait.until(lambda _: "engine" in find(By.ID, "model-line").text)
    find(By.ID, "source").send_keys(SENTENCE)
    find(By.ID, "translate").click()
    wait.until(lambda _: find(By.ID, "heatmap").get_attribute("data-rendered"))

    expected = server.post("/v1/translate", {"texts": [SENTENCE]}).json()
    best = expected["translations"][0]
    assert find(By.ID, "translation").text == best["translation"].strip()
    items = browser.find_elements(By.CSS_SELECTOR, "#nbest li")
    assert len(items) == len(best["n_best"]) >= 2
    assert items[0].get_attribute("class") == "chosen"
    assert f"{best['n_best'][1]['score']:.3f}" in items[1].text
    assert "ms (server" in find(By.ID, "time").text
    assert not find(By.ID, "error").is_displayed()

    heatmap = find(By.ID, "heatmap")
    weights = server.post(
        "/v1/attention", {"source": SENTENCE, "translation": best["translation"]}
    ).json()
    label = heatmap.get_attribute("aria-label")
    assert " ".join(weights["source_tokens"]) in label  # Columns.
    assert " ".join(weights["target_tokens"]) in label  # Rows.
    assert _colours(browser) > 20  # Painted: more than background and text.
    layers = Select(find(By.ID, "layer")).options
    heads = Select(find(By.ID, "head")).options
    assert len(layers) == len(weights["cross_attention"])
    assert [o.text for o in heads][-1] == "all heads"
    screenshot = os.environ.get("KERAS_TRANSFORMER_SCREENSHOT")
    if screenshot:  # Once more, so the time shown is not the first compile's.
        first = find(By.ID, "time").text
        find(By.ID, "translate").click()
        wait.until(lambda _: find(By.ID, "time").text != first)
        items = browser.find_elements(By.CSS_SELECTOR, "#nbest li")
        Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(screenshot)

    width = int(heatmap.get_attribute("width"))
    Select(find(By.ID, "head")).select_by_value("all")
    assert heatmap.get_attribute("data-heads") == str(len(heads) - 1)
    assert int(heatmap.get_attribute("width")) > width  # Small multiples.

    items[1].click()  # Another hypothesis: its own attention.
    wait.until(lambda _: "chosen" in (items[1].get_attribute("class") or ""))
    second = best["n_best"][1]["translation"]
    tokens = server.post("/v1/attention", {"source": SENTENCE, "translation": second})
    rows = " ".join(tokens.json()["target_tokens"])
    wait.until(lambda _: rows in heatmap.get_attribute("aria-label"))


def _colours(browser) -> int:
    """Distinct colours painted on the heatmap canvas."""
    return browser.execute_script(
        """
        const canvas = document.getElementById("heatmap");
        const data = canvas.getContext("2d")
            .getImageData(0, 0, canvas.width, canvas.height).data;
        const seen = new Set();
        for (let i = 0; i < data.length; i += 4) {
            seen.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
        }
        return seen.size;
        """
    )
