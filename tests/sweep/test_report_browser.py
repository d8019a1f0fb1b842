"""report.html in a real browser: headless Chromium from Debian's packages, driven by Selenium.

Opened from the file system (file://, as a user opens OUT/report.html; nothing on the page may need the network),
the table is sorted by clicking its headers and the order is read back from the rendered cells. The driver is
given by path: Selenium Manager (which would try to download one) is never asked. Chromium and chromedriver are
installed by the test set-up, so a missing one is a failure, not a skip.
"""
from __future__ import annotations

import io
import re
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.selenium_manager import SeleniumManager

from bitforge.toolchain.sweep import report
from bitforge.toolchain.sweep.model import Axis, Constraint, Row, SweepSpec

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1280, 900


@pytest.fixture(scope="module")
def browser():
    def no_manager(*args, **kwargs):
        raise AssertionError("Selenium Manager was asked for a driver: the test must give chromedriver's path")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SeleniumManager, "binary_paths", no_manager)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},{HEIGHT}",
                    "--force-device-scale-factor=1"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def make_rows(out: Path) -> list[Row]:
    """Ten points with ties in error (to see the sort is stable), rows without error (failed, and an ok row
    without the metric), params with angle brackets, and each point's report.md/report.json written."""
    errors = [0.3, 0.1, None, 0.2, 0.1, 0.05, None, 0.2, 0.4, 0.1]
    datapaths = ["fixed<16,6>", "fixed<10,3>", "fixed<8,2>"]
    rows = []
    for i, err in enumerate(errors):
        key = f"{i:02d}" + "cd" * 7
        status = "failed" if i == 2 else "ok"
        files = {"report.md": f"points/{key}/report.md", "report.json": f"points/{key}/report.json"}
        for path in files.values():
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            (out / path).write_text(f"point {i}\n")
        rows.append(Row(key=key, index=i, params={"datapath": datapaths[i % 3], "grid_size": 4 + 2 * (i % 4)},
                        status=status, metrics={"error": err, "lut": None if status == "failed" else 100 + 17 * i},
                        stage="synth", reason="synthesis failed <see log>" if status == "failed" else "",
                        folder=f"points/{key}", files=files))
    return rows


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    rows = make_rows(out)
    spec = SweepSpec(kind="learn", base={"task": "t1", "target": "ice40-up5k"},
                     axes=(Axis("datapath", ("fixed<16,6>", "fixed<10,3>", "fixed<8,2>")),
                           Axis("grid_size", (4, 6, 8, 10))),
                     metrics=("error", "lut"), stage="synth", pareto=(("lut", "error"),),
                     constraints=(Constraint("fits ice40-up5k, lowest error", "error",
                                             (("fits", "==", "ice40-up5k"),)),),
                     name="browser <test>")
    paths = report.write_outputs(out, spec, rows, {"executor": "serial", "workers": 1, "seconds": 3.0})
    return browser, out, rows, paths


@pytest.fixture
def fresh(page):
    """The page as loaded, in the rows' order (each test starts from it, whichever ran before, on any worker)."""
    driver, out, rows, paths = page
    driver.get(paths["report.html"].as_uri())
    return page


def column(driver, name: str) -> int:
    heads = driver.find_elements(By.CSS_SELECTOR, "#rows thead th")
    names = [re.sub(r"\s*\(.*\)$", "", h.text) for h in heads]
    return names.index(name)


def cells(driver, col: int) -> list[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#rows tbody tr")
    return [tr.find_elements(By.TAG_NAME, "td")[col].text for tr in rows]


def click_header(driver, name: str):
    th = driver.find_elements(By.CSS_SELECTOR, "#rows thead th")[column(driver, name)]
    th.find_element(By.TAG_NAME, "button").click()
    return th


def aria(driver) -> list[str | None]:
    return [h.get_attribute("aria-sort") for h in driver.find_elements(By.CSS_SELECTOR, "#rows thead th")]


def test_rendered_rows(fresh):
    driver, out, rows, paths = fresh
    assert driver.title == "browser <test>: bitforge sweep"
    trs = driver.find_elements(By.CSS_SELECTOR, "#rows tbody tr")
    assert len(trs) == len(rows) and all(tr.is_displayed() for tr in trs)
    assert cells(driver, column(driver, "datapath")) == [r.params["datapath"] for r in rows]
    # The plot is inline: it decodes without any file or network access.
    img = driver.find_element(By.ID, "pareto-plot")
    width = driver.execute_script("return arguments[0].naturalWidth", img)
    assert width == Image.open(paths["pareto.png"]).size[0]


def stable_sorted(order: list[Row], key, reverse: bool) -> list[int]:
    """The order a stable sort of ``order`` by ``key`` gives, rows without a key last (both directions)."""
    have = [r for r in order if key(r) is not None]
    rest = [r for r in order if key(r) is None]
    return [r.index for r in sorted(have, key=key, reverse=reverse) + rest]


def test_sort_numeric_column(fresh):
    driver, out, rows, _ = fresh
    err = column(driver, "error")
    index = column(driver, "#")
    th = click_header(driver, "error")
    assert th.get_attribute("aria-sort") == "ascending"
    assert [a for a in aria(driver) if a not in (None, "none")] == ["ascending"]
    texts = cells(driver, err)
    numbers = [float(t) for t in texts if t]
    assert numbers == sorted(numbers) and texts[len(numbers):] == ["", ""]
    by_error = lambda r: r.metrics["error"]  # noqa: E731
    ascending = stable_sorted(rows, by_error, reverse=False)
    assert [int(t) for t in cells(driver, index)] == ascending

    th = click_header(driver, "error")
    assert th.get_attribute("aria-sort") == "descending"
    texts = cells(driver, err)
    numbers = [float(t) for t in texts if t]
    assert numbers == sorted(numbers, reverse=True) and texts[len(numbers):] == ["", ""]
    # Ties keep the order they had (the ascending one): a stable sort.
    current = [rows[i] for i in ascending]
    assert [int(t) for t in cells(driver, index)] == stable_sorted(current, by_error, reverse=True)


def test_sort_text_column_naturally(fresh):
    driver, out, rows, _ = fresh
    col = column(driver, "datapath")
    th = click_header(driver, "datapath")
    assert th.get_attribute("aria-sort") == "ascending"
    assert aria(driver)[column(driver, "error")] == "none"
    natural = lambda s: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]  # noqa: E731
    texts = cells(driver, col)
    assert texts == sorted(texts, key=natural) and texts[0] == "fixed<8,2>"
    click_header(driver, "datapath")
    assert cells(driver, col) == sorted(texts, key=natural, reverse=True)


def test_links_point_to_existing_files(fresh):
    driver, out, rows, _ = fresh
    links = driver.find_elements(By.CSS_SELECTOR, "#rows td.files a")
    hrefs = [a.get_attribute("href") for a in links]
    assert len(hrefs) == 3 * len(rows)  # report.json, report.md and the folder of each point
    for href in hrefs:
        url = urlparse(href)
        assert url.scheme == "file"
        path = Path(url2pathname(url.path))
        assert path.exists() and out in path.parents, href
    raw = [a.get_attribute("outerHTML") for a in links]
    assert all(re.search(r'href="points/[0-9a-f]{16}/', h) for h in raw)  # relative in the page


def test_screenshot(fresh, tmp_path):
    driver, *_ = fresh
    shot = tmp_path / "report.png"
    assert driver.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    img = Image.open(io.BytesIO(data))
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight, window.devicePixelRatio]")
    assert img.size == (round(inner[0] * inner[2]), round(inner[1] * inner[2]))
    assert img.size[0] == WIDTH
    colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 1
