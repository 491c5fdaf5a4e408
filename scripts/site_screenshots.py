"""Screenshots of the built documentation site's key pages, for the README
and for reviews: the home page, the own-corpus recipe and the Python API
overview, as a reader sees them in Chromium (Debian's, through its
chromedriver; `scripts/install_browser.sh` installs both).

    bash scripts/docs.sh                       # builds site/
    .venv/bin/python scripts/site_screenshots.py [--site site] [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = {
    "site-home.png": "index.html",
    "site-own-corpus.png": "own-corpus.html",
    "site-api.png": "api/index.html",
}
FLAGS = [
    "--headless=new",
    "--no-sandbox",  # Root in a container.
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",  # The site is local; nothing else.
    "--hide-scrollbars",
    "--window-size=1280,1000",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "site")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    missing = [page for page in PAGES.values() if not (args.site / page).is_file()]
    if missing:
        raise SystemExit(
            f"{args.site}: {', '.join(missing)} missing; run scripts/docs.sh"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(
            service=Service("/usr/bin/chromedriver"), options=options
        )
        try:
            for name, page in PAGES.items():
                driver.get((args.site / page).resolve().as_uri())
                driver.save_screenshot(str(args.out / name))
                print(f"{args.out / name}: {page}")
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
