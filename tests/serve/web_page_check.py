#!/usr/bin/env python3
"""The chat page at `/` in headless Chromium (Selenium with Debian's chromedriver), against a live
serve. Modes:
  chat BASE        a typed message streams a reply, a long reply's pages show in the live panel,
                   stop cancels it (the server then holds nothing), the conversation survives a
                   reload, reasoning is shown folded, regenerate and edit ask again, and the
                   browser log has no error
  apikey BASE KEY  the page asks for the key, says so when a wrong one is refused, works with it
  completion BASE  a base model opens in completion mode and continues a text
  loading BASE     (a toy whose load takes seconds) the page shows the loading progress from
                   /health's 503 answers, then is ready
  tools BASE       (a scripted toy whose reply thinks, then calls get_weather) the reasoning is
                   shown folded and the call as a tool call, not as text
--screenshot PATH saves the page as a PNG at the end. Prints "ok" last when every check passed.
"""
import argparse
import json
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,860", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def wait_for(what, fn, limit=20.0, period=0.05):
    end = time.time() + limit
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(period)
    fail("timed out waiting for " + what)


def text(d, element_id):
    return d.find_element(By.ID, element_id).text


def body_data(d, key):
    return d.execute_script("return document.body.dataset[arguments[0]] || ''", key)


def set_field(d, element_id, value):
    el = d.find_element(By.ID, element_id)
    el.clear()
    if value != "":
        el.send_keys(value)
    d.execute_script("arguments[0].dispatchEvent(new Event('change'))", el)


def get_json(base, path, key=None):
    req = urllib.request.Request(base + path)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def errors_in_log(d):
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def last_assistant(d):
    msgs = d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")
    return msgs[-1] if msgs else None


def reply_text(d):
    m = last_assistant(d)
    if m is None:
        return ""
    return d.execute_script(
        "const m = arguments[0]; const r = m.querySelector('details.reasoning div');"
        "return (r ? r.textContent : '') + m.querySelector('.content').textContent;", m)


def send(d, message):
    box = d.find_element(By.ID, "prompt-input")
    box.send_keys(message)
    box.send_keys(Keys.ENTER)


def check_chat(d, base, screenshot):
    d.get(base + "/?poll=150")
    wait_for("the page to be ready", lambda: text(d, "status") == "ready")
    if body_data(d, "mode") != "chat":
        fail("a model with its own chat template opened in mode " + body_data(d, "mode"))
    if "streams" not in text(d, "model-name"):
        fail("no model line: " + text(d, "model-name"))
    if "GiB" not in text(d, "live-budget"):
        fail("no budget line in the live panel: " + text(d, "live-budget"))
    set_field(d, "temperature", "0")
    set_field(d, "max_tokens", "24")
    set_field(d, "template-kwargs", '{"enable_thinking": false}')
    set_field(d, "system-prompt", "You are terse.")
    set_field(d, "extra-fields", '{"ignore_eos": true}')

    # A short reply streams into the page and gets its numbers.
    send(d, "Hello there")
    wait_for("a finished reply", lambda: last_assistant(d) is not None and
             d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .stats"))
    stats = last_assistant(d).find_element(By.CSS_SELECTOR, ".stats").text
    print("reply:", repr(reply_text(d)[:80]), "|", stats, flush=True)
    if not reply_text(d):
        fail("the reply is empty")
    for part in ("24 tokens", "tokens/s", "first token", "prompt tokens cached"):
        if part not in stats:
            fail("the reply's numbers lack '%s': %s" % (part, stats))

    # A long reply: its text grows while it runs, the panel shows its pages, stop cancels it.
    set_field(d, "max_tokens", "64000")
    send(d, "Tell me a very long story")
    wait_for("the long reply to start", lambda: body_data(d, "busy") == "1" and
             len(reply_text(d)) > 0)
    first = len(reply_text(d))
    wait_for("the reply to grow while it streams", lambda: len(reply_text(d)) > first)
    wait_for("the live panel to show the running request's pages",
             lambda: body_data(d, "busy") == "1" and text(d, "live-running").startswith("1 /")
             and int(text(d, "live-pages-held") or 0) > 0, limit=10)
    held = text(d, "live-pages-held")
    print("live panel while running: held", held, "lanes", text(d, "live-lanes"), "slots",
          text(d, "live-slots"), flush=True)
    if body_data(d, "busy") != "1":
        fail("the reply finished before it could be stopped")
    d.find_element(By.ID, "stop").click()
    wait_for("the page to leave the busy state", lambda: body_data(d, "busy") == "", limit=5)
    stats = wait_for("the stopped reply's numbers", lambda: last_assistant(d).find_elements(
        By.CSS_SELECTOR, ".stats"))[0].text
    if "stopped" not in stats:
        fail("a stopped reply does not say so: " + stats)

    def released():
        load = get_json(base, "/v1/load")
        p = load["pages"]
        return load if load["running"] == 0 and p["held"] == 0 and p["promised"] == 0 else None
    load = wait_for("the server to release the stopped request", released, limit=10, period=0.1)
    print("after stop:", json.dumps(load), flush=True)
    wait_for("the panel to show nothing held", lambda: text(d, "live-pages-held") == "0")

    # Conversations are kept in local storage: a reload shows them again.
    d.refresh()
    wait_for("the page to be ready again", lambda: text(d, "status") == "ready")
    n = len(d.find_elements(By.CSS_SELECTOR, "#messages .msg"))
    if n != 4:
        fail("after a reload the conversation shows %d messages, not 4" % n)
    if not d.find_elements(By.CSS_SELECTOR, "#conversations li"):
        fail("no conversation listed after a reload")

    # Without enable_thinking: false the template opens a thinking part, shown folded.
    set_field(d, "template-kwargs", "")
    set_field(d, "max_tokens", "12")
    send(d, "Think first")
    reply_done(d, 6)
    folded = last_assistant(d).find_elements(By.CSS_SELECTOR, "details.reasoning")
    if not folded or folded[0].get_attribute("open") is not None:
        fail("the reasoning is not shown folded")

    # Regenerate asks the last turn again in its place; edit rewrites a turn and drops the rest.
    before = reply_text(d)
    set_field(d, "temperature", "")  # sampled, so the new reply differs
    last_assistant(d).find_element(By.XPATH, ".//button[text()='regenerate']").click()
    reply_done(d, 6)
    print("regenerated:", repr(before[:30]), "->", repr(reply_text(d)[:30]), flush=True)
    first_user = d.find_elements(By.CSS_SELECTOR, "#messages .msg.user")[0]
    first_user.find_element(By.XPATH, ".//button[text()='edit']").click()
    area = d.find_element(By.CSS_SELECTOR, "#messages .msg.user textarea")
    area.clear()
    area.send_keys("Hello again")
    d.find_element(By.XPATH, "//button[text()='save and send']").click()
    reply_done(d, 2)
    user_text = d.find_element(By.CSS_SELECTOR, "#messages .msg.user .content").text
    if user_text != "Hello again":
        fail("the edited turn reads " + repr(user_text))

    errors = errors_in_log(d)
    if errors:
        fail("browser log errors: %s" % errors)
    if screenshot:
        wait_for("the live panel", lambda: text(d, "live-pages-free") != "–")
        d.save_screenshot(screenshot)


def reply_done(d, messages):
    """Waits until the conversation shows `messages` messages, the last a finished reply."""
    wait_for("a finished reply among %d messages" % messages, lambda: body_data(d, "busy") == ""
             and len(d.find_elements(By.CSS_SELECTOR, "#messages .msg")) == messages
             and last_assistant(d) is not None
             and last_assistant(d).find_elements(By.CSS_SELECTOR, ".stats"))


def check_apikey(d, base, key):
    d.get(base + "/")
    wait_for("the API-key prompt", lambda: d.find_element(By.ID, "key-dialog").get_attribute(
        "open") is not None)
    if "API key" not in text(d, "key-reason"):
        fail("the prompt does not say why: " + text(d, "key-reason"))
    box = d.find_element(By.ID, "key-input")
    box.send_keys("wrong-key")
    box.send_keys(Keys.ENTER)
    wait_for("the refusal to be shown", lambda: "refused" in text(d, "key-reason") and
             d.find_element(By.ID, "key-dialog").get_attribute("open") is not None)
    if "API key" not in text(d, "status"):
        fail("the status line does not say a key is needed: " + text(d, "status"))
    box = d.find_element(By.ID, "key-input")
    box.clear()
    box.send_keys(key)
    box.send_keys(Keys.ENTER)
    wait_for("the page to be ready with the key", lambda: text(d, "status") == "ready")
    wait_for("the live panel with the key", lambda: text(d, "live-pages-free") != "–")


def check_completion(d, base, screenshot):
    d.get(base + "/")
    wait_for("the page to be ready", lambda: text(d, "status") == "ready", limit=40)
    if body_data(d, "mode") != "completion":
        fail("a base model opened in mode " + body_data(d, "mode"))
    set_field(d, "temperature", "0")
    set_field(d, "max_tokens", "40")
    area = d.find_element(By.ID, "completion-text")
    area.clear()
    prompt = "The three largest cities in France are"
    area.send_keys(prompt)
    d.find_element(By.ID, "complete").click()
    wait_for("the continuation", lambda: body_data(d, "busy") == "" and
             "tokens" in text(d, "completion-stats"), limit=40)
    value = area.get_attribute("value")
    print("completion:", repr(value), "|", text(d, "completion-stats"), flush=True)
    if not value.startswith(prompt) or len(value) <= len(prompt):
        fail("the text was not continued")
    # The panel catches up: nothing running, the finished request's pages kept in the store.
    wait_for("the live panel to show the kept prompt", lambda: text(d, "live-running") == "0 / 0"
             and not text(d, "live-pages-kept").startswith("0 "), limit=10)
    print("live panel after:", text(d, "live-pages-kept"), "|", text(d, "live-pages-free"),
          flush=True)
    errors = errors_in_log(d)
    if errors:
        fail("browser log errors: %s" % errors)
    if screenshot:
        d.save_screenshot(screenshot)


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}}}}


def check_tools(d, base):
    d.get(base + "/")
    wait_for("the page to be ready", lambda: text(d, "status") == "ready")
    if body_data(d, "mode") != "chat":
        fail("a toy with a chat template opened in mode " + body_data(d, "mode"))
    set_field(d, "extra-fields", json.dumps({"tools": [WEATHER_TOOL]}))
    send(d, "What is the weather in Paris?")
    reply_done(d, 2)
    m = last_assistant(d)
    calls = m.find_elements(By.CSS_SELECTOR, ".tool-call")
    if len(calls) != 1:
        fail("%d tool calls shown, not 1" % len(calls))
    call = calls[0].text
    print("tool call:", call, flush=True)
    if not call.startswith("tool call: get_weather(") or '"city"' not in call or "Paris" not in call:
        fail("the tool call reads " + repr(call))
    if "<tool_call>" in m.find_element(By.CSS_SELECTOR, ".content").text:
        fail("the call was left in the text")
    folded = m.find_elements(By.CSS_SELECTOR, "details.reasoning")
    if not folded or folded[0].get_attribute("open") is not None:
        fail("the reasoning is not shown folded")
    reasoning = d.execute_script("return arguments[0].querySelector('div').textContent", folded[0])
    if "The user wants weather" not in reasoning:
        fail("the reasoning reads " + repr(reasoning))
    errors = errors_in_log(d)
    if errors:
        fail("browser log errors: %s" % errors)


def check_loading(d, base):
    d.get(base + "/")
    seen = set()

    def progress():
        # One script reads both, so a bar hidden between two reads is not taken for an empty one.
        shown, pct, status = d.execute_script(
            "return [!document.getElementById('loading').hidden,"
            " document.getElementById('loading-text').textContent,"
            " document.getElementById('status').textContent]")
        if shown:
            seen.add(pct)
        return status == "ready"
    wait_for("the load to finish", progress, limit=30)
    print("loading states seen:", sorted(seen), flush=True)
    if not seen or not all(t.endswith("%") and 0 <= int(t[:-1]) <= 100 for t in seen):
        fail("the page did not show the load's progress: %s" % sorted(seen))
    if d.find_element(By.ID, "loading").is_displayed():
        fail("the loading bar is still shown once ready")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["chat", "apikey", "completion", "tools", "loading"])
    ap.add_argument("base")
    ap.add_argument("key", nargs="?")
    ap.add_argument("--screenshot")
    a = ap.parse_args()
    d = browser()
    try:
        if a.mode == "chat":
            check_chat(d, a.base, a.screenshot)
        elif a.mode == "apikey":
            check_apikey(d, a.base, a.key)
        elif a.mode == "loading":
            check_loading(d, a.base)
        elif a.mode == "tools":
            check_tools(d, a.base)
        else:
            check_completion(d, a.base, a.screenshot)
    finally:
        d.quit()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
