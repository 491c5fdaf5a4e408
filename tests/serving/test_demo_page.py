"""The demo page in a real browser: Debian's headless Chromium, driven by
selenium through Debian's chromedriver (no browser download), against a
`keras-transformer serve` process on 127.0.0.1.

The browser is tests/browser.py's (scripts/install_browser.sh installs it
when missing; this module is skipped, saying so, only where that was
impossible). Set KERAS_TRANSFORMER_SCREENSHOT=docs/serve-demo.png to keep
the screenshot, and KERAS_TRANSFORMER_DEMO_RUN=RUN_DIR to serve a trained
run instead of the test's untrained one (the README's screenshot: the
`small` Multi30k run).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.browser import start_chromium
from tests.serving.client import ServerProcess

webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]

SENTENCE = "A man in a blue shirt is playing the guitar on the street."
# Two paragraphs, three sentences: the page sends split_sentences.
DOCUMENT = (
    "A man is riding a bike down the street. Two dogs are playing in the snow.\n"
    "\n"
    "A woman is reading a book in the park."
)
# Its second sentence is over --max-text-tokens (256): a run of letters the
# 300-piece vocabulary spells at most two to a piece, within --max-text-chars.
TOO_MANY_TOKENS = "A dog runs on the beach. " + "Zq" * 495 + "."


@pytest.fixture(scope="module")
def server(tmp_path_factory, untrained_run):
    run, flags = os.environ.get("KERAS_TRANSFORMER_DEMO_RUN"), []
    if run is None:  # Untrained: its outputs run to the limit; keep it short.
        run = untrained_run
        flags = ["--max-extra-length", "8"]
    log = tmp_path_factory.mktemp("logs") / "server.log"
    process = ServerProcess(["--run-dir", str(run), *flags], log)
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory)
    yield driver
    driver.quit()


def test_type_translate_and_see_the_n_best_and_the_attention(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    find, wait = _open(browser, server)
    info = server.get("/v1/info").json()
    beam = Select(find(By.ID, "beam-size"))
    assert [o.get_attribute("value") for o in beam.options] == [
        str(size) for size in info["allowed"]["beam_sizes"]
    ]
    assert beam.first_selected_option.get_attribute("value") == str(
        info["settings"]["beam_size"]
    )
    alpha = Select(find(By.ID, "alpha")).first_selected_option
    assert float(alpha.get_attribute("value")) == info["settings"]["alpha"]
    find(By.ID, "source").send_keys(SENTENCE)
    find(By.ID, "translate").click()
    wait.until(lambda _: find(By.ID, "heatmap").get_attribute("data-rendered"))

    expected = server.post("/v1/translate", {"texts": [SENTENCE]}).json()
    best = expected["translations"][0]
    assert find(By.ID, "translation").text == best["translation"].strip()
    assert not find(By.ID, "sentences").is_displayed()  # One sentence: as before.
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
    assert " ".join(_shown(weights["source_tokens"])) in label  # Columns.
    assert " ".join(_shown(weights["target_tokens"])) in label  # Rows.
    raw = json.loads(heatmap.get_attribute("data-tokens"))
    assert raw == {
        "source": weights["source_tokens"],
        "target": weights["target_tokens"],
    }
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
    rows = " ".join(_shown(tokens.json()["target_tokens"]))
    wait.until(lambda _: rows in (heatmap.get_attribute("aria-label") or ""))


def test_an_error_hides_the_previous_result(server, browser):
    from selenium.webdriver.common.by import By

    find, wait = _open(browser, server)
    find(By.ID, "source").send_keys(SENTENCE)
    find(By.ID, "translate").click()
    wait.until(lambda _: find(By.ID, "heatmap").get_attribute("data-rendered"))
    assert find(By.ID, "translation").is_displayed()

    _type(browser, TOO_MANY_TOKENS)
    find(By.ID, "translate").click()
    wait.until(lambda _: find(By.ID, "error").is_displayed())
    error = find(By.ID, "error").text
    assert error.startswith("413 ") and "texts[0].sentences[1]" in error
    for hidden in ("translation", "nbest", "heatmap"):
        assert not find(By.ID, hidden).is_displayed(), hidden
    assert find(By.ID, "time").text == ""
    assert not browser.find_elements(By.CSS_SELECTOR, "#nbest li")
    assert find(By.ID, "heatmap").get_attribute("data-rendered") is None


def test_a_document_is_translated_sentence_by_sentence(server, browser):
    from selenium.webdriver.common.by import By

    find, wait = _open(browser, server)
    find(By.ID, "source").send_keys(DOCUMENT)  # Enter in a textarea: a new line.
    assert find(By.ID, "source").get_property("value") == DOCUMENT
    find(By.ID, "translate").click()
    wait.until(lambda _: find(By.ID, "heatmap").get_attribute("data-rendered"))

    body = {"texts": [DOCUMENT], "split_sentences": True}
    document = server.post("/v1/translate", body).json()["translations"][0]
    sentences = document["sentences"]
    assert len(sentences) == 3
    # Shown as sent, line breaks and all (white-space: pre-wrap keeps them
    # in the element's visible text too): two paragraphs, a blank line between.
    shown = find(By.ID, "translation").text
    assert shown == document["translation"]
    assert [bool(line) for line in shown.split("\n")] == [True, False, True]

    items = browser.find_elements(By.CSS_SELECTOR, "#sentences li")
    assert len(items) == len(sentences)
    assert items[0].get_attribute("class") == "chosen"
    for item, sentence in zip(items, sentences):
        # A list item collapses runs of spaces (an untrained model's output
        # has some); the translation above keeps them (pre-wrap).
        shown_item = _spaces(item.text)
        assert _spaces(sentence["source"]) in shown_item
        assert _spaces(sentence["translation"]) in shown_item

    items[1].click()  # The second sentence: its n-best list and attention.
    wait.until(lambda _: "chosen" in (items[1].get_attribute("class") or ""))
    second = sentences[1]
    hypotheses = browser.find_elements(By.CSS_SELECTOR, "#nbest li .hypothesis")
    expected_hypotheses = [_spaces(h["translation"]) for h in second["n_best"]]
    assert [_spaces(h.text) for h in hypotheses] == expected_hypotheses
    assert "sentence 2" in find(By.ID, "nbest-heading").text
    _wait_for_attention(server, wait, find, second["source"], second["n_best"][0])

    browser.find_elements(By.CSS_SELECTOR, "#nbest li")[1].click()
    _wait_for_attention(server, wait, find, second["source"], second["n_best"][1])


def _wait_for_attention(server, wait, find, source, hypothesis):
    """The heatmap shows the attention of `source` and `hypothesis`."""
    from selenium.webdriver.common.by import By

    body = {"source": source, "translation": hypothesis["translation"]}
    weights = server.post("/v1/attention", body).json()
    rows = "Rows: " + " ".join(_shown(weights["target_tokens"])) + "."
    columns = "Columns: " + " ".join(_shown(weights["source_tokens"])) + "."
    heatmap = find(By.ID, "heatmap")
    wait.until(lambda _: rows in (heatmap.get_attribute("aria-label") or ""))
    assert columns in heatmap.get_attribute("aria-label")


def test_the_favicon_is_linked_and_served(server, browser):
    from selenium.webdriver.common.by import By

    find, _ = _open(browser, server)
    link = find(By.CSS_SELECTOR, 'link[rel="icon"]')
    assert link.get_attribute("href").endswith("/static/favicon.svg")
    answer = server.get("/static/favicon.svg")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("image/svg+xml")
    assert answer.body.startswith(b"<svg")


def test_the_character_counter_follows_the_typing(server, browser):
    from selenium.webdriver.common.by import By

    find, wait = _open(browser, server)
    limits = server.get("/v1/info").json()["limits"]
    limit = limits["max_document_chars"]
    source, counter = find(By.ID, "source"), find(By.ID, "counter")
    assert source.get_attribute("maxlength") == str(limit)
    assert counter.text == f"0 / {limit:,} characters"
    assert f"at most {limits['max_text_tokens']:,} subword tokens" in (
        find(By.ID, "token-limit").text
    )
    source.send_keys("A dog")
    wait.until(lambda _: counter.text == f"5 / {limit:,} characters")
    source.send_keys(" runs.")
    wait.until(lambda _: counter.text.startswith("11 / "))
    assert "near" not in (counter.get_attribute("class") or "")
    _type(browser, "a" * (limit - 10))
    assert "near" in counter.get_attribute("class")
    _type(browser, "a" * limit)
    assert "over" in counter.get_attribute("class")


def test_byte_pieces_are_shown_as_their_characters(server, browser):
    from selenium.webdriver.common.by import By

    find, wait = _open(browser, server)
    merged = browser.execute_script(
        """
        const labels = (tokens) => mergeBytePieces(tokens).map((g) => g.label);
        const view = mergedView({
            source_tokens: ["<0xC3>", "<0xBC>", "</s>"],
            target_tokens: ["<0xC3>", "<0xBC>", "</s>"],
            cross_attention: [[[[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]]],
        });
        return [labels(["<0xF0>", "<0x9F>", "\u2581b"]), labels(["<0xE2>", "<0x82>",
            "<0xAC>", "<0x0A>"]), view.attention[0][0]];
        """
    )
    assert merged[0] == ["\ufffd", "\u2581b"]  # Incomplete: one U+FFFD.
    assert merged[1] == ["\u20ac", "<0x0A>"]  # A newline would draw as nothing.
    # Source columns summed (rows still sum to 1), target rows averaged:
    rows = [0.45, 0.55], [0.75, 0.25]  # Rows 1-2 averaged, then columns 1-2 summed.
    assert [pytest.approx(row) for row in rows] == merged[2]

    source = "A dog \U0001f6b2 runs."  # Not in the vocabulary: four byte pieces.
    _type(browser, source)
    find(By.ID, "translate").click()
    wait.until(lambda _: find(By.ID, "heatmap").get_attribute("data-rendered"))
    best = server.translate([source])[0]
    weights = server.post("/v1/attention", {"source": source, "translation": best})
    tokens = weights.json()["source_tokens"]
    assert "<0xF0>" in tokens
    heatmap = find(By.ID, "heatmap")
    label = heatmap.get_attribute("aria-label")
    assert "\U0001f6b2" in label and "<0xF0>" not in label
    assert "Columns: " + " ".join(_shown(tokens)) + "." in label
    raw = json.loads(heatmap.get_attribute("data-tokens"))
    assert raw["source"] == tokens


def test_no_attention_controls_without_attention(server, browser):
    """A CTranslate2 or SavedModel server says "attention": false; its info
    is imitated here by rewriting the page's /v1/info answer."""
    from selenium.webdriver.common.by import By

    script = browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": """
            const fetched = window.fetch;
            window.fetch = async (path, options) => {
                const response = await fetched(path, options);
                if (path !== "/v1/info") return response;
                const info = await response.json();
                return new Response(JSON.stringify({ ...info, attention: false }));
            };
            window.attentionCalls = 0;
            const counted = window.fetch;
            window.fetch = (path, options) => {
                if (path === "/v1/attention") window.attentionCalls++;
                return counted(path, options);
            };
            """
        },
    )
    try:
        find, wait = _open(browser, server)
        find(By.ID, "source").send_keys(SENTENCE)
        find(By.ID, "translate").click()
        wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, "#nbest li.chosen"))
        browser.find_elements(By.CSS_SELECTOR, "#nbest li")[1].click()
        for hidden in ("attention", "layer", "head", "heatmap"):
            assert not find(By.ID, hidden).is_displayed(), hidden
        assert "click one to plot" not in find(By.ID, "result").text
        assert browser.execute_script("return window.attentionCalls") == 0
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument",
            {"identifier": script["identifier"]},
        )


KEY = "demo-page-key-" + "k" * 20


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory, untrained_run):
    """A server with --api-key-file; greedy, short limits: a quick warm-up."""
    folder = tmp_path_factory.mktemp("keyed")
    (folder / "key").write_text(KEY + "\n")
    process = ServerProcess(
        ["--run-dir", str(untrained_run), "--api-key-file", str(folder / "key"),
         "--beam-size", "1", "--max-extra-length", "4", "--warmup-tokens", "8",
         "--max-text-tokens", "64"],
        folder / "server.log",
    )  # fmt: skip
    yield process
    assert process.stop() == 0


def test_with_an_api_key_the_page_asks_for_it_and_sends_it(keyed_server, browser):
    """The page loads without the key; its first API call's 401 shows the
    key field; a wrong key is refused, the right one kept for the tab and
    sent with every call."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = keyed_server
    browser.get(f"http://127.0.0.1:{server.port}/")
    find, wait = browser.find_element, WebDriverWait(browser, 300)
    wait.until(lambda _: find(By.ID, "key-panel").is_displayed())
    assert "needs an API key (401)" in find(By.ID, "key-message").text
    assert "--api-key-file" in find(By.ID, "error").text
    assert find(By.ID, "model-line").text == "Waiting for the API key…"
    assert browser.switch_to.active_element == find(By.ID, "api-key")

    find(By.ID, "api-key").send_keys("not-the-key")
    find(By.ID, "key-save").click()
    wait.until(lambda _: "refused" in find(By.ID, "key-message").text)
    assert "engine" not in find(By.ID, "model-line").text

    find(By.ID, "api-key").send_keys(KEY + "\n")  # Enter submits the form.
    wait.until(lambda _: "engine" in find(By.ID, "model-line").text)
    assert find(By.ID, "key-message").text == ""
    assert not find(By.ID, "error").is_displayed()
    assert find(By.ID, "api-key").get_property("value") == ""  # Not left shown.
    stored = "return sessionStorage.getItem('keras-transformer-api-key')"
    assert browser.execute_script(stored) == KEY
    find(By.ID, "source").send_keys(SENTENCE)
    find(By.ID, "translate").click()
    wait.until(
        lambda _: (
            find(By.ID, "heatmap").get_attribute("data-rendered")
            or find(By.ID, "error").is_displayed()
        )
    )
    assert not find(By.ID, "error").is_displayed(), find(By.ID, "error").text
    body = json.dumps({"texts": [SENTENCE], "split_sentences": True}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    expected = server.request("POST", "/v1/translate", body, headers).json()
    assert find(By.ID, "translation").text == (
        expected["translations"][0]["translation"].strip()
    )

    browser.refresh()  # The tab keeps the key: no question this time.
    wait.until(lambda _: "engine" in find(By.ID, "model-line").text)
    assert find(By.ID, "key-message").text == ""
    find(By.ID, "key-forget").click()
    assert browser.execute_script(stored) is None


def _shown(tokens: list[str]) -> list[str]:
    """The heatmap's labels of `tokens`: each run of byte pieces as the
    characters its bytes spell (the tiny test vocabulary spells even "A" so)."""
    labels, run = [], bytearray()
    for token in [*tokens, None]:
        byte = re.fullmatch(r"<0x([0-9A-F]{2})>", token or "")
        if byte:
            run.append(int(byte[1], 16))
            continue
        labels += run.decode("utf-8", errors="replace")
        run.clear()
        if token is not None:
            labels.append(token)
    return labels


def _open(browser, server):
    """The page, once it has read /v1/info: (find_element, a long wait)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"http://127.0.0.1:{server.port}/")
    wait = WebDriverWait(browser, 300)
    wait.until(lambda _: "engine" in browser.find_element(By.ID, "model-line").text)
    return browser.find_element, wait


def _type(browser, text: str) -> None:
    """`text` in the textarea at once, as a paste would put it (send_keys
    is slow for long texts and cannot type characters outside the BMP)."""
    browser.execute_script(
        """
        const source = document.getElementById("source");
        source.value = arguments[0];
        source.dispatchEvent(new Event("input"));
        """,
        text,
    )


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


def _spaces(text: str) -> str:
    """`text` with runs of whitespace as one space, as HTML shows it."""
    return " ".join(text.split())
