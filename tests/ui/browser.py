"""Headless Debian chromium driven by Selenium, and the workbench served by uvicorn on 127.0.0.1.

Selenium is given /usr/bin/chromium and /usr/bin/chromedriver, and Selenium Manager is kept offline,
so nothing is ever downloaded.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,900")


def find_browser() -> tuple[str, str] | None:
    """(chromium, chromedriver) paths, or None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    return (browser, driver) if browser and driver else None


@contextmanager
def chromium(download_dir: str) -> Iterator[object]:
    """A headless chromium with a fresh profile; downloads go to ``download_dir``."""
    os.environ["SE_OFFLINE"] = "true"   # Selenium Manager never fetches anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    browser, driver_path = find_browser()
    profile = tempfile.mkdtemp(prefix="openrknn-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS + (f"--user-data-dir={profile}",):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": download_dir,
                                              "download.prompt_for_download": False})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextmanager
def serve(app: object) -> Iterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port in a thread; yields the base URL."""
    import uvicorn
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)
