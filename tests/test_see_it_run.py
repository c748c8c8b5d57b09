#!/usr/bin/env python3
"""The "See it run" page in a real browser (headless Chromium through Selenium).

Makes a fresh trace with the tracer, lays the page out beside it, opens it, steps through stage 02's online softmax and through blocks of stages 04 and 05, with and
without the causal mask, and checks that every number the page shows is the trace's, that
the kernels' outputs it shows match the float64 reference, and that the tiles it marks as
skipped are those above the diagonal. Saves screenshots of what it checked.

    test_see_it_run.py --tracer BUILD/bin/see_it_run_trace --out DIR [--screenshots DIR]
    test_see_it_run.py --page BUILD/see-it-run      # a page already laid out with its trace

Exits 77 (CTest: skipped) when Selenium, Chromium or ChromeDriver is missing:
    sudo apt-get install -y chromium chromium-driver python3-selenium
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

SKIP = 77


def revive(x):
    """The tracer writes infinities as strings; the page reads them back the same way."""
    if x == "-inf":
        return -math.inf
    if x == "inf":
        return math.inf
    if isinstance(x, list):
        return [revive(v) for v in x]
    if isinstance(x, dict):
        return {k: revive(v) for k, v in x.items()}
    return x


def shown(text):
    """A number as the page prints it (six significant digits, −∞ for -inf)."""
    text = text.strip().replace("−", "-")
    return -math.inf if text == "-∞" else float(text)


def close(a, b, rel=2e-6, abs_=1e-9):
    """Whether a number the page shows (six digits) is `b`."""
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)) * 5)


class Failures:
    def __init__(self):
        self.count = 0

    def check(self, ok, what):
        if not ok:
            self.count += 1
            if self.count <= 20:
                print(f"FAILED: {what}")
        return ok


def browser():
    """A headless Chromium, or None with the reason printed."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("SKIPPED: no Selenium for this Python (apt-get install python3-selenium)")
        return None
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not chrome or not driver:
        print("SKIPPED: no Chromium and ChromeDriver (apt-get install chromium chromium-driver)")
        return None
    options = Options()
    options.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1900",
              "--allow-file-access-from-files"):
        options.add_argument(a)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def check_softmax(d, by, trace, f, shots):
    sm = trace["softmax"]
    d.find_element(by.ID, "tab-softmax").click()
    for k, step in enumerate(sm["steps"], start=1):
        d.find_element(by.ID, "sm-next").click()
        row = d.find_element(by.ID, f"sm-row-{k}")
        for name in ("x", "m", "alpha", "l"):
            value = shown(row.find_element(by.CSS_SELECTOR, f"td.{name}").text)
            f.check(close(value, step[name]), f"softmax step {k}: {name} shows {value}, the trace has {step[name]}")
        if k == 3:
            d.find_element(by.ID, "view-softmax").screenshot(os.path.join(shots, "see-it-run-softmax.png"))
    # The three rows of probabilities: value by value, the kernel, the float64 reference,
    # and an independent float64 softmax of x computed here.
    x = sm["x"]
    mx = max(x)
    denom = sum(math.exp(v - mx) for v in x)
    want = [math.exp(v - mx) / denom for v in x]
    for row_id, source in (("sm-p-update", sm["p"]), ("sm-p-kernel", sm["kernel"]["p"]),
                           ("sm-p-reference", sm["reference"]["p"])):
        cells = d.find_elements(by.CSS_SELECTOR, f"#{row_id} td.p")
        f.check(len(cells) == len(x), f"{row_id}: {len(cells)} probabilities for {len(x)} values")
        for c, (cell, p, w) in enumerate(zip(cells, source, want)):
            value = shown(cell.text)
            f.check(close(value, p), f"{row_id}[{c}] shows {value}, the trace has {p}")
            f.check(abs(value - w) <= 1e-5, f"{row_id}[{c}] = {value}, float64 softmax here gives {w}")


def run_of(trace, stage, causal):
    return next(r for r in trace["runs"] if r["stage"] == stage and r["causal"] == causal)


def check_block(d, by, trace, stage, causal, block, row, f):
    """Clicks `block` of `stage`, picks `row`, steps to the end, checks every step's numbers."""
    P = trace["problem"]
    run = run_of(trace, stage, causal)
    b = next(x for x in run["blocks"] if x["block"] == block)
    panel = f"#stage-{stage}"
    d.find_element(by.CSS_SELECTOR, f"{panel} .block[data-block='{block}']").click()
    from selenium.webdriver.common.keys import Keys
    box = d.find_element(by.CSS_SELECTOR, f"{panel} .row-input")
    box.send_keys(Keys.CONTROL, "a")  # typed over, as a learner would
    box.send_keys(str(row), Keys.ENTER)
    shown_row = d.find_element(by.CSS_SELECTOR, f"{panel} .row-input").get_attribute("value")
    f.check(shown_row == str(row), f"{stage} block {block}: the row box shows {shown_row}, not {row}")
    last = None
    steps_checked = 0
    for n, e in enumerate(b["events"], start=1):
        d.find_element(by.CSS_SELECTOR, f"{panel} .next").click()
        label = d.find_element(by.CSS_SELECTOR, f"{panel} .step-label").text
        f.check(label.endswith(f"step {n} of {len(b['events'])}"), f"{stage} block {block}: label '{label}' at step {n}")
        if e["op"] == "step" and str(row) in e.get("rows", {}):
            last = e["rows"][str(row)]
        shown_m = d.find_elements(by.CSS_SELECTOR, f"{panel} td.val-m")
        if last is None:
            f.check(not shown_m, f"{stage} block {block} step {n}: values shown before any step reached row {row}")
            continue
        steps_checked += 1
        for name in ("m", "l", "alpha", "m_tile", "l_tile"):
            cells = d.find_elements(by.CSS_SELECTOR, f"{panel} td.val-{name}")
            if name in last:
                f.check(len(cells) == 1 and close(shown(cells[0].text), last[name]),
                        f"{stage} block {block} step {n}: {name} of row {row} shows "
                        f"{[c.text for c in cells]}, the trace has {last[name]}")
        o = [shown(c.text) for c in d.find_elements(by.CSS_SELECTOR, f"{panel} .val-o .num")]
        f.check(len(o) == P["dim"] and all(close(a, w) for a, w in zip(o, last["o"])),
                f"{stage} block {block} step {n}: O of row {row} shows {o[:4]}..., the trace has {last['o'][:4]}...")
    f.check(steps_checked > 0, f"{stage} block {block}: no step reached row {row}")

    # The end: the output row as the kernel wrote it, beside the float64 reference.
    flat = (b["batch"] * P["heads"] + b["head"]) * P["seq_q"] + row
    got = [shown(c.text) for c in d.find_elements(by.CSS_SELECTOR, f"{panel} .out-o .num")]
    ref = [shown(c.text) for c in d.find_elements(by.CSS_SELECTOR, f"{panel} .ref-o .num")]
    f.check(len(got) == P["dim"] and all(close(a, w) for a, w in zip(got, run["o"][flat])),
            f"{stage} block {block}: the output row shown is not the kernel's")
    f.check(len(ref) == P["dim"] and all(close(a, w) for a, w in zip(ref, run["reference"]["o"][flat])),
            f"{stage} block {block}: the reference row shown is not the trace's")
    f.check(all(abs(a - w) <= 1e-5 for a, w in zip(got, ref)),
            f"{stage} block {block}: output {got[:4]}... is not the float64 reference {ref[:4]}...")
    # After the last step, m and l are the row's: the max of its scaled scores and the sum.
    ref = run["reference"]
    f.check(abs(last["m"] - ref["m"][flat]) <= 1e-5 * max(1.0, abs(ref["m"][flat])),
            f"{stage} block {block}: the last m of row {row} is {last['m']}, float64 gives {ref['m'][flat]}")
    f.check(abs(last["l"] - ref["l"][flat]) <= 1e-5 * ref["l"][flat],
            f"{stage} block {block}: the last l of row {row} is {last['l']}, float64 gives {ref['l'][flat]}")
    # Stage 04 keeps O in HBM: its last step's O of the row is the output itself.
    if stage == "04_flash1":
        f.check(all(close(a, w) for a, w in zip(last["o"], run["o"][flat])),
                f"{stage} block {block}: the last O in HBM is not the output")

    # The tiles marked skipped: exactly those above the diagonal, and none without the mask.
    skipped = {r.get_attribute("data-tile") for r in d.find_elements(by.CSS_SELECTOR, f"{panel} rect.tile.skipped")}
    first, last_row = (b["q_tile"] * P["Br"], min(P["seq_q"], (b["q_tile"] + 1) * P["Br"])) if "q_tile" in b \
        else (0, P["seq_q"])
    expect = set()
    if causal:
        for i in range(first, last_row, P["Br"]):
            for j in range(0, P["seq_kv"], P["Bc"]):
                if j > i + P["Br"] - 1:
                    expect.add(f"{j},{i}")
    f.check(skipped == expect, f"{stage} block {block}: tiles shown skipped {sorted(skipped)}, above the diagonal "
            f"{sorted(expect)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracer", help="see_it_run_trace: make a fresh trace and lay the page out in --out")
    ap.add_argument("--out", help="with --tracer: the folder for the page, its trace and the screenshots")
    ap.add_argument("--page", help="without --tracer: the folder with see-it-run.html and trace.json")
    ap.add_argument("--screenshots", default=None, help="where to save screenshots (default: the page's folder)")
    args = ap.parse_args()
    if args.tracer:
        if not args.out:
            ap.error("--tracer needs --out")
        subprocess.run([args.tracer, "--out", args.out], check=True)
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "see-it-run")
        for name in ("see-it-run.html", "see-it-run.js", "see-it-run.css"):
            shutil.copyfile(os.path.join(source, name), os.path.join(args.out, name))
        args.page = args.out
    elif not args.page:
        ap.error("give --tracer and --out, or --page")
    shots = args.screenshots or args.page
    os.makedirs(shots, exist_ok=True)
    with open(os.path.join(args.page, "trace.json")) as fh:
        trace = revive(json.load(fh))

    d = browser()
    if d is None:
        return SKIP
    from selenium.webdriver.common.by import By
    f = Failures()
    try:
        d.get("file://" + os.path.abspath(os.path.join(args.page, "see-it-run.html")))
        f.check("seed" in d.find_element(By.ID, "trace-source").text, "the page did not load the trace")
        check_softmax(d, By, trace, f, shots)

        P = trace["problem"]
        d.find_element(By.ID, "tab-grids").click()
        q_tiles = -(-P["seq_q"] // P["Br"])
        last_q_tile_block = q_tiles * P["heads"] - 1  # the last head's ragged last Q tile
        ragged_row = P["seq_q"] - 1
        check_block(d, By, trace, "05_flash2", False, last_q_tile_block, ragged_row, f)
        check_block(d, By, trace, "04_flash1", False, 0, P["Br"] + 3, f)
        d.find_element(By.ID, "view-grids").screenshot(os.path.join(shots, "see-it-run-blocks.png"))
        d.find_element(By.ID, "mask-causal").click()
        check_block(d, By, trace, "05_flash2", True, 0, 5, f)
        check_block(d, By, trace, "04_flash1", True, P["heads"] - 1, ragged_row, f)
        d.find_element(By.ID, "view-grids").screenshot(os.path.join(shots, "see-it-run-causal.png"))

        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        f.check(not errors, f"the page logged errors: {errors}")
    finally:
        d.quit()
    print(f"screenshots in {shots}")
    if f.count:
        print(f"{f.count} check(s) failed")
        return 1
    print("the page shows the trace's numbers, and the kernels' outputs match float64: PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
