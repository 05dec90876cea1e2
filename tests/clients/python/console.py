"""Drives loghaul's console in a real browser (Debian's chromium, headless, through
chromium-driver and Selenium) as a person would, and prints what it saw as one JSON object.

    console.py URL TOKEN SCREENSHOT ID...

1. Opens the page and gives a wrong token: the page must say so and show no component.
2. Gives TOKEN: every ID must appear in the graph and the table, and the source's events/s
   must be read twice, two seconds apart.
3. Starts the tap panel on all outputs and reads the first lines.
4. Saves a screenshot to SCREENSHOT.

Exit 0 with the JSON on stdout; on a failed step, exit 1 with the reason on stderr.
"""

import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def fail(why, driver=None):
    if driver is not None:
        print(driver.page_source[:4000], file=sys.stderr)
    print(why, file=sys.stderr)
    sys.exit(1)


def wait(driver, what, pred, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            got = pred()
            if got:
                return got
        except Exception:  # the page may be redrawing
            pass
        time.sleep(0.2)
    fail("timed out waiting for " + what, driver)


def rows(driver):
    # Read in one step inside the page: the table is redrawn every second, and elements found
    # one call earlier may be gone by the next.
    return driver.execute_script("""
        const out = {};
        for (const tr of document.querySelectorAll('#components tbody tr[data-component]'))
            out[tr.dataset.component] = [...tr.querySelectorAll('td')].map(td => td.textContent);
        return out;
    """)


def main():
    url, token, screenshot, *ids = sys.argv[1:]
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    seen = {}
    try:
        driver.get(url)
        # No token yet: the page asks for it.
        wait(driver, "the token form", lambda: driver.find_element(By.ID, "login").is_displayed())
        box = driver.find_element(By.ID, "token")
        box.send_keys("not-the-token")
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        refused = wait(
            driver, "the refusal",
            lambda: "refused" in driver.find_element(By.ID, "alert").text
            and driver.find_element(By.ID, "alert").text)
        seen["wrong_token_alert"] = refused
        seen["wrong_token_rows"] = len(rows(driver))
        seen["wrong_token_nodes"] = driver.execute_script(
            "return document.querySelectorAll('#graph g[data-component]').length")

        box = driver.find_element(By.ID, "token")
        box.clear()
        box.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait(driver, "every component in the table", lambda: set(ids) <= set(rows(driver)))
        seen["graph_nodes"] = driver.execute_script(
            "return [...document.querySelectorAll('#graph g[data-component]')]"
            ".map(g => g.dataset.component)")
        seen["edges"] = driver.execute_script(
            "return [...document.querySelectorAll('#graph text[data-edge]')]"
            ".map(t => t.dataset.edge + ' ' + t.textContent)")
        source = ids[0]
        first = wait(driver, "a rate on " + source, lambda: rows(driver)[source][3] != "0" and rows(driver)[source][3])
        time.sleep(2.0)
        second = wait(driver, "a rate on " + source, lambda: rows(driver)[source][3] != "0" and rows(driver)[source][3])
        seen["rates"] = [first, second]
        seen["table"] = rows(driver)
        seen["header_in"] = driver.find_element(By.ID, "total-in").text

        driver.find_element(By.ID, "tap-start").click()
        seen["tap_first"] = wait(driver, "tapped events", lambda: driver.execute_script(
            "const d = document.querySelector('#tap-out div'); return d && d.textContent"))
        driver.save_screenshot(screenshot)
        driver.find_element(By.ID, "tap-stop").click()
    finally:
        driver.quit()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
