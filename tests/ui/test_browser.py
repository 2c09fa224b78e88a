"""The workbench in a real headless chromium: convert → analyse → export, and bad input at its field.

Screenshots of every page go to ``OPENRKNN_UI_SCREENSHOTS`` (a folder) when that is set; docs/ui.md
shows them (bench/ui_screenshots.py makes the small copies committed there).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from openrknn.model_file import load_model_bytes
from tests.ui.browser import chromium, find_browser, serve

pytest.importorskip("selenium", reason="the browser tests need selenium (the 'test' extra)")
pytest.importorskip("uvicorn", reason="the browser tests need uvicorn (the 'ui' extra)")
pytest.importorskip("starlette", reason="the browser tests need the 'ui' extra: pip install 'openrknn[ui]'")
pytest.importorskip("multipart", reason="the browser tests need python-multipart (the 'ui' extra)")
if find_browser() is None:
    pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from openrknn.ui.app import create_app  # noqa: E402

PAGES = ("model", "config", "job", "graph", "accuracy", "perf", "hybrid", "inference", "export")


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    with chromium(str(downloads)) as driver:
        yield driver


@pytest.fixture
def workbench(tmp_path, browser):
    app = create_app(str(tmp_path / "work"))
    with serve(app) as url:
        browser.get(f"{url}/?token={app.state.secret}")   # the start URL: the session cookie for this server
        yield url, app.state.bench


def shot(driver, name: str) -> None:
    folder = os.environ.get("OPENRKNN_UI_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        height = driver.execute_script("return Math.min(document.body.scrollHeight, 2400)")
        driver.set_window_size(1280, max(600, height))
        driver.save_screenshot(os.path.join(folder, f"{name}.png"))
        driver.set_window_size(1280, 900)


def left_page(page):
    """A wait condition: ``page`` (an element of the old document) is gone. Chromium reports a node of a
    replaced document either as stale or, while the new one loads, as "does not belong to the
    document"; both mean the browser left the page."""
    def gone(_driver) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" in str(e):
                return True
            raise
        return False
    return gone


def submit(driver, until_path: str, limit_s: float = 60) -> None:
    """Press the form's button and wait until the browser lands on ``until_path`` (jobs redirect)."""
    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, "submit").click()
    WebDriverWait(driver, limit_s, 0.05).until(left_page(page))   # left the form (it may post to itself)
    WebDriverWait(driver, limit_s, 0.1).until(lambda d: d.current_url.split("?")[0].endswith(until_path)
                                              and d.execute_script("return document.readyState") == "complete")


def pick_model(driver, url: str, path: Path, size: str = "", inputs: str = "") -> None:
    driver.get(url + "/")
    driver.find_element(By.ID, "model_file").send_keys(str(path))
    driver.find_element(By.ID, "input_size_list").send_keys(size)
    driver.find_element(By.ID, "inputs").send_keys(inputs)


def fill(driver, **values: str) -> None:
    for name, value in values.items():
        element = driver.find_element(By.ID, name)
        if element.get_attribute("type") == "checkbox":
            if bool(value) != element.is_selected():
                element.click()
        elif element.tag_name == "select":
            element.find_element(By.CSS_SELECTOR, f'option[value="{value}"]').click()
        else:
            element.clear()
            element.send_keys(value)


def convert_and_analyse(driver, url: str, bench, model: Path, calib: Path, size: str, inputs: str,
                        mean: str, std: str, prefix: str) -> int:
    """Model → config & build → graph → accuracy (click the worst dot); screenshots named ``prefix*``."""
    def snap(name: str) -> None:
        shot(driver, prefix + name)

    pick_model(driver, url, model, size, inputs)
    snap("1-model")
    submit(driver, "/config")
    fill(driver, target_platform="rk3588", mean_values=mean, std_values=std, do_quantization="on",
         dataset=str(calib))
    snap("2-config")
    driver.find_element(By.ID, "submit").click()
    WebDriverWait(driver, 10, 0.05).until(lambda d: "/job/" in d.current_url or d.current_url.endswith("/graph"))
    if "/job/" in driver.current_url:
        snap("3-build-progress")
    WebDriverWait(driver, 90, 0.1).until(lambda d: d.current_url.endswith("/graph"))
    text = driver.find_element(By.ID, "layer-count").text
    count = int(re.match(r"(\d+) layers", text).group(1))
    assert count == bench_layer_count(bench)
    boxes = int(re.search(r"(\d+) boxes", text).group(1))
    assert boxes == len(driver.find_elements(By.CSS_SELECTOR, "#layer-graph g.layer")) >= count + 2
    assert driver.find_elements(By.CSS_SELECTOR, '#layer-graph g.layer[data-dtype="int8"]')
    snap("4-graph")

    driver.get(url + "/accuracy")
    submit(driver, "/accuracy")
    rows = bench.analysis_rows()
    scored = [r for r in rows if r["single_cos"] is not None]
    dots = driver.find_elements(By.CSS_SELECTOR, 'circle.pt[data-series="single"]')
    assert len(dots) == len(scored)
    assert [d.get_attribute("data-label") for d in dots] == [r["tensor"] for r in scored]
    assert [float(d.get_attribute("data-value")) for d in dots] == pytest.approx([r["single_cos"] for r in scored],
                                                                                   rel=1e-5)
    worst = min(range(len(scored)), key=lambda i: scored[i]["single_cos"])   # click the worst layer's dot
    target = scored[worst]["tensor"]
    driver.execute_script("arguments[0].parentNode.dispatchEvent(new MouseEvent('click', {bubbles: true}))",
                          dots[worst])
    WebDriverWait(driver, 10, 0.1).until(lambda d: d.find_elements(By.ID, "selected-layer"))
    assert driver.find_element(By.ID, "selected-layer").text == target
    assert driver.find_elements(By.CSS_SELECTOR, 'rect.bin[data-series="simulator"]')
    snap("5-accuracy")
    return count


def bench_layer_count(bench) -> int:
    from openrknn.graph.layer_index import count_layers
    return count_layers(bench.model.graph.graph)


def no_sideways_scroll(driver) -> bool:
    return driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")


def export_and_download(driver, url: str, bench, downloads: Path) -> bytes:
    driver.get(url + "/export")
    submit(driver, "/export")
    name = driver.find_element(By.ID, "download").text
    (downloads / name).unlink(missing_ok=True)
    driver.find_element(By.ID, "download").click()
    deadline = time.monotonic() + 20
    while not (downloads / name).is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    data = (downloads / name).read_bytes()
    assert data == Path(bench.export_path).read_bytes()
    assert int(driver.find_element(By.ID, "size").text) == len(data)
    return data


def test_convert_analyse_export_in_the_browser(browser, workbench, small_model, downloads):
    url, bench = workbench
    model, calib = small_model
    convert_and_analyse(browser, url, bench, model, calib, "", "", "0 0 0", "255 255 255", "")

    browser.get(url + "/perf")
    fill(browser, **{"chip-rk3566": "on"})
    submit(browser, "/perf")
    chips = [b.get_attribute("data-label") for b in browser.find_elements(By.CSS_SELECTOR, "svg.bar-chart")[0]
             .find_elements(By.CSS_SELECTOR, "rect.bar")]
    assert chips == ["rk3566", "rk3588"] or chips == ["rk3588", "rk3566"]
    shot(browser, "6-perf")

    browser.get(url + "/hybrid")
    conv = next(name for name, op, _ in bench.hybrid_candidates() if op == "Conv")
    browser.find_element(By.ID, f"layer-{conv}").click()
    submit(browser, "/hybrid")
    assert conv in browser.find_element(By.ID, "float-layers").text
    shot(browser, "7-hybrid")

    browser.get(url + "/inference")
    browser.find_element(By.ID, "image").send_keys(str(calib / "c1.npy"))
    submit(browser, "/inference")
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.top5 tr")) == 6    # header + five classes
    shot(browser, "8-inference")

    data = export_and_download(browser, url, bench, downloads)
    assert load_model_bytes(data).is_quantized
    shot(browser, "9-export")


@pytest.mark.integration
def test_pp_ocr_cls_in_the_browser(browser, workbench, shared_data, tmp_path, downloads):
    from PIL import Image
    url, bench = workbench
    model = shared_data / "models" / "onnx" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    if not model.is_file():
        pytest.skip(f"{model.name} not in the shared models")
    calib = tmp_path / "calib"
    calib.mkdir()
    for name in ("text.png", "coffee.png"):
        with Image.open(shared_data / "images" / name) as img:
            img.convert("RGB").resize((192, 48)).save(calib / name)
    count = convert_and_analyse(browser, url, bench, model, calib, "1,3,48,192", "x", "123.675 116.28 103.53",
                                "58.395 57.12 57.375", "ocr-")
    assert count > 20
    legends = browser.find_elements(By.CSS_SELECTOR, "svg.histogram text.legend")   # the layer's histograms
    assert len(legends) == 2 and legends[0].rect["x"] + legends[0].rect["width"] <= legends[1].rect["x"]
    browser.get(url + "/perf")
    fill(browser, **{"chip-rk3566": "on"})
    submit(browser, "/perf")
    assert no_sideways_scroll(browser)
    data = export_and_download(browser, url, bench, downloads)
    assert load_model_bytes(data).inputs[0].shape[-2:] in ([48, 192], [192, 3])


def error_at(driver, field: str, limit_s: float = 30) -> str:
    """The error text shown next to ``field`` (waits for the page that shows it)."""
    from selenium.common.exceptions import WebDriverException

    def shown(d):
        try:
            found = d.find_elements(By.ID, f"error-{field}")
            return found[0].text if found else None
        except WebDriverException:   # the page was replaced while being read (the job page moves on by itself)
            return None

    return WebDriverWait(driver, limit_s, 0.1).until(shown)


def test_bad_input_is_shown_next_to_the_field(browser, workbench, small_model, tmp_path):
    url, bench = workbench
    model, _ = small_model
    bad = tmp_path / "photo.onnx"
    bad.write_bytes(b"\xff\xd8\xff not an onnx model")
    pick_model(browser, url, bad)
    browser.find_element(By.ID, "submit").click()
    assert "photo.onnx" in error_at(browser, "model")
    assert [f for _, _, files in os.walk(bench.work_dir) for f in files] == []

    pick_model(browser, url, model)
    submit(browser, "/config")
    fill(browser, mean_values="1 2", std_values="1 1")
    browser.find_element(By.ID, "submit").click()
    assert "mean_values for input 'x' has 2 value(s)" in error_at(browser, "mean_values")
    shot(browser, "10-config-error")

    empty = tmp_path / "empty"
    empty.mkdir()
    fill(browser, mean_values="", std_values="", do_quantization="on", dataset=str(empty))
    browser.find_element(By.ID, "submit").click()
    assert "no calibration file" in error_at(browser, "dataset")
    assert not os.path.exists(os.path.join(bench.work_dir, "exports"))
    assert not os.path.exists(os.path.join(bench.work_dir, "datasets"))
