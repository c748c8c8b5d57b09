#!/usr/bin/env python3
"""The "See it run" page in a real browser (headless Chromium through Selenium).

Makes a fresh trace with the tracer, lays the page out beside it, opens it and checks every
view against the trace and against what is computed here:
- stage 02's online softmax, step by step;
- blocks of stages 04 and 05, with and without the causal mask: every number shown is the
  trace's, the outputs match float64, the tiles marked skipped are those above the diagonal;
- HBM bytes: each block's reads and writes are its events' bytes, and without the mask the
  totals are each stage's IO model exactly;
- stage 06's fragments: every register of warp 0 sits where the PTX ISA's layouts put it and
  holds Q, K, V, S or P there; each lane's row max and the two shuffles; ldmatrix's addresses;
- stage 07's swizzle: where each chunk of K lies, the lanes' addresses and their bank
  conflicts (none swizzled, 8-way in plain rows);
- stage 07's pipeline: the cp.async groups by the ISA's rule, each tile computed after its
  copy landed, no buffer refilled too early, the overlap with and without the prefetch;
- stage 08's ring: each tile's slot, the producer's and consumers' barrier waits with their
  parities, each slot refilled only after every consumer let go, the overlap, the ping-pong
  turns, and the ring's state on the page at several steps;
- stage 09's split-KV: each split's and each warp's (m, l, O) against float64, the merge;
- stage 10's backward: every tile pair's P, dP, dS and additions to dK, dV, dQ against float64.
Saves screenshots of what it checked. With --plants, plants a bug in each view's script
instead (PLANTS) and passes only if each is caught.

    test_see_it_run.py --tracer BUILD/bin/see_it_run_trace --out DIR [--screenshots DIR] [--plants]
    test_see_it_run.py --page BUILD/see-it-run      # a page already laid out with its trace

Exits 77 (CTest: skipped) when Selenium, Chromium or ChromeDriver is missing:
    sudo apt-get install -y chromium chromium-driver python3-selenium
"""
import argparse
import json
import math
import os
import shutil
import struct
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


class Caught(Exception):
    """Raised by a Failures(first_only=True) at its first failed check: a planted bug is caught."""


class Failures:
    def __init__(self, first_only=False):
        self.count = 0
        self.first_only = first_only

    def check(self, ok, what):
        if not ok:
            self.count += 1
            if self.first_only:
                raise Caught(what)
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
    names = ("m", "l", "alpha", "m_tile", "l_tile")
    for n, e in enumerate(b["events"], start=1):
        d.find_element(by.CSS_SELECTOR, f"{panel} .next").click()  # each step draws the panel anew
        # What the step shows, read in one round trip to the browser: the label, each value's cells, O.
        view = d.execute_script(
            "const p = document.querySelector(arguments[0]); const texts = (sel) => "
            "[...p.querySelectorAll(sel)].map((e) => e.innerText);"
            "return {label: p.querySelector('.step-label').innerText, o: texts('.val-o .num'),"
            " values: Object.fromEntries(arguments[1].map((name) => [name, texts('td.val-' + name)]))};",
            panel, names)
        label = view["label"]
        f.check(label.endswith(f"step {n} of {len(b['events'])}"), f"{stage} block {block}: label '{label}' at step {n}")
        if e["op"] == "step" and str(row) in e.get("rows", {}):
            last = e["rows"][str(row)]
        if last is None:
            f.check(not view["values"]["m"], f"{stage} block {block} step {n}: values shown before any step reached row {row}")
            continue
        steps_checked += 1
        for name in names:
            texts = view["values"][name]
            if name in last:
                f.check(len(texts) == 1 and close(shown(texts[0]), last[name]),
                        f"{stage} block {block} step {n}: {name} of row {row} shows {texts}, the trace has {last[name]}")
        o = [shown(t) for t in view["o"]]
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


# ---- HBM bytes (stages 04, 05) -------------------------------------------------------------
ROW_ELEMS = {"Q": None, "K": None, "V": None, "O": None, "m": 1, "l": 1, "lse": 1}


def event_bytes(e, dim):
    """Bytes of a load or store event, counted here: its rows times each tensor's fp32 row."""
    return sum(e["count"] * (dim if ROW_ELEMS[name] is None else ROW_ELEMS[name]) * 4 for name in e["what"].split(", "))


def model_bytes(stage, P):
    """Each stage's IO model, written out here independently of the tracer's hbm_bytes_model()."""
    bh, nq, nkv, d = P["batch"] * P["heads"], P["seq_q"], P["seq_kv"], P["dim"]
    if stage == "04_flash1":
        kv_tiles = -(-nkv // P["Bc"])
        return bh * (2 * nkv * d * 4 + kv_tiles * (3 * nq * d * 4 + 4 * nq * 4) + nq * d * 4 + 2 * nq * 4)
    q_tiles = -(-nq // P["Br"])
    return bh * (nq * d * 4 + q_tiles * 2 * nkv * d * 4 + nq * d * 4 + nq * 4)


def check_hbm(d, by, trace, f, shots):
    P = trace["problem"]
    d.find_element(by.ID, "tab-hbm").click()
    for causal in (False, True):
        box = d.find_element(by.ID, "hbm-causal")
        if box.is_selected() != causal:
            box.click()
        for stage in ("04_flash1", "05_flash2"):
            run = run_of(trace, stage, causal)
            total = 0
            for b in run["blocks"]:
                read = sum(event_bytes(e, P["dim"]) for e in b["events"] if e["op"] == "load")
                written = sum(event_bytes(e, P["dim"]) for e in b["events"] if e["op"] == "store")
                total += read + written
                row = d.find_element(by.CSS_SELECTOR, f"#hbm-{stage} tr.hbm-block[data-block='{b['block']}']")
                for name, want in (("read", read), ("written", written)):
                    got = float(row.find_element(by.CSS_SELECTOR, f"td.{name}").get_attribute("data-value"))
                    f.check(got == want, f"hbm {stage} causal={causal} block {b['block']}: {name} shows {got}, "
                            f"the trace's events make {want}")
            shown_total = float(d.find_element(by.CSS_SELECTOR, f"#hbm-{stage} .hbm-trace-total").get_attribute("data-value"))
            f.check(shown_total == total, f"hbm {stage} causal={causal}: total shows {shown_total}, the events make {total}")
            shown_model = float(d.find_element(by.CSS_SELECTOR, f"#hbm-{stage} .hbm-model").get_attribute("data-value"))
            want_model = model_bytes(stage, P)
            f.check(shown_model == run["model_bytes"] == want_model,
                    f"hbm {stage}: the model shows {shown_model}, the trace has {run['model_bytes']}, the formula {want_model}")
            # Without the mask the kernel moves exactly what its model says; with it, less.
            f.check(total == want_model if not causal else total < want_model,
                    f"hbm {stage} causal={causal}: the trace moves {total} bytes, the model says {want_model}")
            # The running count of the block shown: its last line is the block's totals.
            first = run["blocks"][0]
            cells = d.find_elements(by.CSS_SELECTOR, f"#hbm-{stage} table.hbm-steps tr td.read")
            moves = [e for e in first["events"] if e["op"] in ("load", "store")]
            f.check(len(cells) == len(moves), f"hbm {stage}: {len(cells)} lines for {len(moves)} loads and stores")
        if not causal:
            d.find_element(by.ID, "view-hbm").screenshot(os.path.join(shots, "see-it-run-hbm.png"))


# ---- fragments (stage 06) -------------------------------------------------------------------
def a_at(lane, e):
    """The PTX ISA's A layout of mma.m16n8k16 (row, column) of element e of a lane's registers."""
    g, t, i = lane // 4, lane % 4, e // 2
    return g + 8 * (i % 2), 2 * t + e % 2 + 8 * (i // 2)


def b_at(lane, e):
    """B (k, n); registers 2 and 3 of an ldmatrix.x4 are the next n-tile's b0, b1."""
    g, t, i = lane // 4, lane % 4, e // 2
    return 2 * t + e % 2 + 8 * (i % 2), g + 8 * (i // 2)


def c_at(lane, e):
    """C (row, column) of fp32 element e, n-tile e // 4."""
    g, t = lane // 4, lane % 4
    return g + 8 * (e // 2 % 2), 2 * t + e % 2 + 8 * (e // 4)


def fp16(x):
    """x, a float32 written with nine digits, as the float32 it was, rounded to fp16 (ties to even)."""
    x = struct.unpack("<f", struct.pack("<f", x))[0]
    return struct.unpack("<e", struct.pack("<e", x))[0]


def same(a, b):
    """Whether two numbers agree to the nine significant digits the trace keeps."""
    return abs(a - b) <= 5e-9 * max(abs(a), abs(b))


def cells(d, selector):
    """Every element matching `selector`, as its data-* attributes (one round trip to the browser)."""
    return d.execute_script("return [...document.querySelectorAll(arguments[0])].map((e) => Object.assign("
                            "{mine: e.classList.contains('mine'), read: e.classList.contains('read')}, e.dataset));",
                            selector)


def check_fragments(d, by, trace, f, shots):
    F = trace["fragments"]
    L = {name: {r["lane"]: r for r in recs} for name, recs in F["lanes"].items()}
    Q, K, V = F["q"], F["k"], F["v"]
    S = [[sum(Q[r][k] * K[c][k] for k in range(F["dim"])) for c in range(F["Bc"])] for r in range(16)]
    # The kernel's registers against the matrices, through the ISA's layouts (no page yet).
    for lane in range(32):
        for e, x in enumerate(L["A = Q"][lane]["values"]):
            r, c = a_at(lane, e)
            f.check(x == Q[r][c], f"trace: lane {lane} A = Q element {e} is {x}, Q[{r}][{c}] is {Q[r][c]}")
        for e, x in enumerate(L["B = K"][lane]["values"]):
            k, n = b_at(lane, e)
            f.check(x == K[n][k], f"trace: lane {lane} B = K element {e} is {x}, K[{n}][{k}] is {K[n][k]}")
        for e, x in enumerate(L["B = V"][lane]["values"]):
            k, n = b_at(lane, e)
            f.check(x == V[k][n], f"trace: lane {lane} B = V element {e} is {x}, V[{k}][{n}] is {V[k][n]}")
        for e, x in enumerate(L["S"][lane]["values"]):
            r, c = c_at(lane, e)
            f.check(abs(x - S[r][c]) <= 1e-4 * max(1.0, abs(S[r][c])), f"trace: lane {lane} S[{r}][{c}] is {x}, float64 {S[r][c]}")
        for e, x in enumerate(L["A = P"][lane]["values"]):  # k-step 0: P's n-tiles 0 and 1
            r, c = a_at(lane, e)
            p = next(v for e2, v in enumerate(L["P"][lane]["values"]) if c_at(lane, e2) == (r, c))
            f.check(same(x, fp16(p)), f"trace: lane {lane} A = P element {e} is {x}, P there is {p} (fp16 {fp16(p)})")
        # A row's scores live in its quad: the lane's own max is over its columns of S (rows g and g + 8).
        for h, name in ((0, "row max g"), (1, "row max g+8")):
            row = lane // 4 + 8 * h
            own = max(S[row][c] * F["scale_log2"] for c in range(F["Bc"]) if c % 8 // 2 == lane % 4)
            got = L[name][lane]["values"][0]
            f.check(abs(got - own) <= 1e-4 * max(1.0, abs(own)), f"trace: lane {lane}'s own max of row {row} is {got}, "
                    f"its columns give {own}")
            row_max = max(S[row][c] * F["scale_log2"] for c in range(F["Bc"]))
            got = L[name][lane]["values"][1]
            f.check(abs(got - row_max) <= 1e-4 * max(1.0, abs(row_max)), f"trace: lane {lane}'s m_new of row {row} is {got}, "
                    f"row max {row_max}")

    d.find_element(by.ID, "tab-fragments").click()
    grids = {"frag-a": ("A = Q", a_at, lambda r, c: Q[r][c], 8),
             "frag-b": ("B = K", b_at, lambda k, n: K[n][k], 4),
             "frag-c": ("S", c_at, None, 4),
             "frag-pc": ("P", c_at, None, 8),
             "frag-pa": ("A = P", a_at, None, 8)}
    for lane in (0, 4, 9, 14, 19, 22, 27, 31):  # a lane of every quad: every row's max
        d.find_element(by.ID, f"frag-lane-{lane}").click()
        for grid, (name, at, source, mine_count) in grids.items():
            shown_cells = cells(d, f"#{grid} td.cell")
            f.check(len(shown_cells) in (128, 256), f"fragments {grid}: {len(shown_cells)} cells")
            for cell in shown_cells:
                r, c = int(cell["row"]), int(cell["col"])
                holder, value = int(cell["lane"]), float(cell["value"])
                es = [e for e in range(len(L[name][holder]["values"])) if at(holder, e) == (r, c)]
                f.check(len(es) == 1 and L[name][holder]["values"][es[0]] == value,
                        f"fragments {grid} ({r}, {c}): the page says lane {holder} holds {value}; by the ISA's layout it "
                        f"holds {[L[name][holder]['values'][e] for e in es]}")
                if source is not None:
                    f.check(value == source(r, c), f"fragments {grid} ({r}, {c}) shows {value}, the matrix has {source(r, c)}")
            mine = [int(c["lane"]) for c in shown_cells if c["mine"]]
            f.check(mine == [lane] * mine_count, f"fragments {grid}: lane {lane} is shown holding {len(mine)} cells "
                    f"(of lanes {sorted(set(mine))}), not {mine_count}")
        # The quad's max: each lane's own, the two shuffles, the kernel's m_new.
        quad = [4 * (lane // 4) + k for k in range(4)]
        for h, name, table in ((0, "row max g", "frag-rowmax"), (1, "row max g+8", "frag-rowmax-8")):
            row = lane // 4 + 8 * h
            own = [L[name][n]["values"][0] for n in quad]
            x1 = [max(own[k], own[k ^ 1]) for k in range(4)]
            x2 = [max(x1[k], x1[k ^ 2]) for k in range(4)]
            for cls, want in (("own", own), ("x1", x1), ("x2", x2)):
                got = [float(c.get_attribute("data-value")) for c in d.find_elements(by.CSS_SELECTOR, f"#{table} td.{cls}")]
                f.check(got == want, f"fragments row max of row {row}: {cls} shows {got}, want {want}")
            kernel = [float(c.get_attribute("data-value")) for c in d.find_elements(by.CSS_SELECTOR, f"#{table} td.kernel")]
            f.check(kernel == x2, f"fragments row max of row {row}: two shuffles give {x2}, the kernel had {kernel}")
        if lane == 9:
            d.find_element(by.ID, "view-fragments").screenshot(os.path.join(shots, "see-it-run-fragments.png"))
    # ldmatrix: the row address each lane handed it, as the kernel computed it.
    want = {"A = Q": lambda n: (n % 8 + 8 * (n // 8 % 2), 8 * (n // 16)),
            "B = K": lambda n: (n % 8 + 8 * (n // 16), 8 * (n // 8 % 2)),
            "B = V": lambda n: (n % 8 + 8 * (n // 8 % 2), 8 * (n // 16))}
    addresses = cells(d, "#frag-ldmatrix td.addr")
    f.check(len(addresses) == 96, f"fragments ldmatrix: {len(addresses)} addresses shown, not 32 lanes x 3")
    for cell in addresses:
        n, name = int(cell["lane"]), cell["name"]
        got = (int(cell["row"]), int(cell["col"]))
        f.check(got == want[name](n), f"fragments ldmatrix: lane {n} {name} shows {got}, lane {n} gives {want[name](n)}")
        off = L[name][n]["offset"]
        f.check(got == (off // F["stride"], off % F["stride"]), f"fragments ldmatrix: lane {n} {name}: offset {off}")


# ---- the swizzle (stage 07) -----------------------------------------------------------------
def check_swizzle(d, by, trace, f, shots):
    d.find_element(by.ID, "tab-swizzle").click()
    for run in trace["swizzle"]:
        chunks = run["dim"] // 8
        # Where each chunk (row r, chunk c) lies: c ^ (r % 8) in its row when swizzled (d = 64).
        for place, (r, c) in enumerate(run["places"]):
            pos = c ^ (r % 8) if run["variant"] == "tuned" else c
            f.check(place == r * chunks + pos, f"swizzle {run['variant']}: place {place} holds K row {r} chunk {c}")
    for matrix in range(4):
        d.find_element(by.ID, f"swz-matrix-{matrix}").click()
        for run in trace["swizzle"]:
            v = run["variant"]
            lanes = run["lanes"]["B = K"][8 * matrix:8 * matrix + 8]
            for rec in lanes:  # the registers each lane received: row lane / 4 of every matrix
                n = rec["lane"]
                for e, x in enumerate(rec["values"]):
                    i = e // 2
                    key, col = 8 * (i // 2) + n // 4, 8 * (i % 2) + 2 * (n % 4) + e % 2
                    want_x = run["k"][key][col]
                    f.check(x == want_x, f"swizzle {v}: lane {n} element {e} is {x}, K[{key}][{col}] is {want_x}")
            groups = [(rec["offset"] * 2 // 16) % 8 for rec in lanes]
            ways = max(groups.count(g) for g in groups)
            f.check(ways == (1 if v == "tuned" else 8), f"swizzle {v} matrix {matrix}: the addresses make a {ways}-way conflict")
            shown = d.find_element(by.CSS_SELECTOR, f"#swz-col-{v} .conflicts")
            f.check(int(shown.get_attribute("data-ways")) == ways and int(shown.get_attribute("data-groups")) == len(set(groups)),
                    f"swizzle {v} matrix {matrix}: the page says {shown.text!r}; the addresses make {ways} ways "
                    f"in {len(set(groups))} groups")
            chunks = run["dim"] // 8
            shown_cells = cells(d, f"#swz-{v} td.chunk")
            read = sorted(int(c["place"]) for c in shown_cells if c["read"])
            f.check(read == sorted(rec["offset"] // 8 for rec in lanes), f"swizzle {v} matrix {matrix}: cells marked read {read}")
            f.check(len(shown_cells) == 16 * chunks, f"swizzle {v}: {len(shown_cells)} places shown")
            for cell in shown_cells:
                place = int(cell["place"])
                got = [int(cell["keyRow"]), int(cell["chunk"])]
                f.check(got == run["places"][place], f"swizzle {v}: place {place} shows {got}, the trace {run['places'][place]}")
        if matrix == 0:
            d.find_element(by.ID, "view-swizzle").screenshot(os.path.join(shots, "see-it-run-swizzle.png"))


# ---- the copy pipeline (stage 07) -----------------------------------------------------------
def cp_async_groups(events):
    """The PTX ISA's cp.async groups, written out here: (groups [{copies, committed, landed}], in flight after each event)."""
    groups, pending, open_, in_flight = [], [], [], []
    for n, e in enumerate(events):
        if e["op"] == "copy":
            open_.append(e)
        elif e["op"] == "commit":
            groups.append({"id": len(groups), "copies": open_, "committed": n, "landed": None})
            pending.append(groups[-1])
            open_ = []
        elif e["op"] == "wait":
            while len(pending) > e["n"]:
                pending.pop(0)["landed"] = n
        in_flight.append([g["id"] for g in pending])
    return groups, in_flight


def check_pipeline(d, by, trace, f, shots):
    d.find_element(by.ID, "tab-pipeline").click()
    for run in trace["pipeline"]:
        v, events = run["variant"], run["events"]
        groups, in_flight = cp_async_groups(events)
        tiles = list(range(0, run["seq_kv"], run["Bc"]))
        computes = [(n, e) for n, e in enumerate(events) if e["op"] == "compute"]
        f.check([e["tile"] for _, e in computes] == tiles, f"pipeline {v}: computes on tiles {[e['tile'] for _, e in computes]}")
        barriers = [n for n, e in enumerate(events) if e["op"] == "barrier"]
        for n, e in computes:
            # The tile's copy landed (a wait) and a barrier followed, before the compute ...
            g = next((g for g in groups if any(c["what"] == "K, V" and c["first"] == e["tile"] and c["buffer"] == e["buffer"]
                                               for c in g["copies"])), None)
            f.check(g is not None and g["landed"] is not None and g["landed"] < n and
                    any(g["landed"] < b < n for b in barriers),
                    f"pipeline {v}: tile {e['tile']} is computed at step {n} before its copy is landed and visible")
            # ... and no copy into its buffer starts until a barrier after the compute.
            later = [m for m, c in enumerate(events) if c["op"] == "copy" and c["buffer"] == e["buffer"] and m > n]
            if later:
                f.check(any(n < b < later[0] for b in barriers),
                        f"pipeline {v}: buffer {e['buffer']} is refilled at step {later[0]} with no barrier after step {n}")
        overlapped = sum(1 for n, _ in computes if any(g["committed"] < n and (g["landed"] is None or g["landed"] > n)
                                                       for g in groups))
        want = len(computes) - 1 if v == "tuned" else 0  # the prefetch hides every copy but the first tile's
        f.check(overlapped == want, f"pipeline {v}: {overlapped} computes overlap a copy, want {want}")
        # The page: every group's bar, every step's groups in flight, the count of overlapped computes.
        bars = sorted((int(b["group"]), int(b["start"]), int(b["end"])) for b in cells(d, f"#pipe-svg-{v} rect.group"))
        want_bars = [(g["id"], g["committed"], len(events) if g["landed"] is None else g["landed"]) for g in groups]
        f.check(bars == want_bars, f"pipeline {v}: bars {bars}, the ISA's groups {want_bars}")
        rows = cells(d, f"#pipe-events-{v} tr[data-event]")
        f.check([r["inFlight"] for r in rows] == [",".join(map(str, x)) for x in in_flight],
                f"pipeline {v}: the groups in flight shown differ from the ISA's rule")
        shown_n = d.find_element(by.CSS_SELECTOR, f"#pipe-{v} .conflicts")
        f.check(int(shown_n.get_attribute("data-overlapped")) == overlapped,
                f"pipeline {v}: the page counts {shown_n.text!r}, {overlapped} overlap")
    d.find_element(by.ID, "view-pipeline").screenshot(os.path.join(shots, "see-it-run-pipeline.png"))

# ---- stage 08's ring ------------------------------------------------------------------------
def check_ring(d, by, trace, f, shots):
    R = trace["ring"]
    ev, slots, C = R["events"], R["slots"], R["consumers"]
    tiles = -(-R["seq_kv"] // R["Bc"])
    at = lambda **kw: [n for n, e in enumerate(ev) if all(e[k] == v for k, v in kw.items())]
    loads = {e["tile"]: n for n, e in enumerate(ev) if e["op"] == "load" and e["what"] == "K, V"}
    f.check(sorted(loads) == list(range(tiles)), f"ring: tiles loaded {sorted(loads)}, want 0..{tiles - 1}")
    for t, n in loads.items():
        f.check(ev[n]["slot"] == t % slots, f"ring: tile {t} loaded into slot {ev[n]['slot']}, not {t % slots}")
        # The producer's wait on empty[slot]: parity (round & 1) ^ 1, and for round > 0 after every consumer let go.
        waits = at(warpgroup=0, op="wait", what="empty", tile=t)
        f.check(len(waits) == 1 and waits[0] < n and ev[waits[0]]["parity"] == ((t // slots) & 1) ^ 1,
                f"ring: the producer's wait on empty[{t % slots}] for tile {t}: {[ev[w] for w in waits]}")
        if t >= slots and waits:
            freed = [m for m in at(op="arrive", what="empty", tile=t - slots)]
            f.check(len(freed) == C and max(freed) < waits[0],
                    f"ring: tile {t} goes into slot {t % slots} at step {waits[0]} before all {C} consumers let go of tile "
                    f"{t - slots} (arrivals at {freed})")
        for c in range(1, C + 1):  # each consumer: waits on k_full and v_full after the load, with the round's parity
            for name, use in (("k_full", "S = Q·Kᵀ"), ("v_full", "O += P·V")):
                w = at(warpgroup=c, op="wait", what=name, tile=t)
                i = at(warpgroup=c, op="issue", what=use, tile=t)
                f.check(len(w) == 1 and len(i) == 1 and n < w[0] < i[0] and ev[w[0]]["parity"] == (t // slots) & 1
                        and ev[w[0]]["slot"] == t % slots,
                        f"ring: consumer {c - 1} reads tile {t} ({name}) at steps {w}, {i}; loaded at {n}")
            done = at(warpgroup=c, op="arrive", what="empty", tile=t)
            pv = at(warpgroup=c, op="issue", what="O += P·V", tile=t)
            f.check(len(done) == 1 and pv and done[0] > pv[0], f"ring: consumer {c - 1} lets go of tile {t} before its P·V")
            if t + 1 < tiles:  # the overlap: S of the next tile is issued before P·V of this one
                nxt = at(warpgroup=c, op="issue", what="S = Q·Kᵀ", tile=t + 1)
                f.check(nxt and pv and nxt[0] < pv[0], f"ring: consumer {c - 1} issues S of tile {t + 1} after P·V of tile {t}")
    # Ping-pong: turns alternate, and within a turn the other consumer issues nothing.
    turns = [e["warpgroup"] for e in ev if e["op"] == "turn"]
    f.check(turns == [1 + k % C for k in range(len(turns))] and len(turns) >= tiles,
            f"ring: turns taken by warpgroups {turns}")
    for n in at(op="turn"):
        w = ev[n]["warpgroup"]
        end = next(m for m in range(n, len(ev)) if ev[m]["op"] == "pass" and ev[m]["warpgroup"] == w)
        others = [m for m in range(n, end) if ev[m]["op"] == "issue" and ev[m]["warpgroup"] != w]
        f.check(not others, f"ring: warpgroup {3 - w} issues at {others}, during warpgroup {w}'s turn {n}-{end}")

    # The page: the lanes and the ring's state at every step, against the state simulated here.
    d.find_element(by.ID, "tab-ring").click()
    boxes = cells(d, "#ring-lanes rect.step")
    f.check([(int(b["event"]), int(b["warpgroup"]), b["op"]) for b in boxes] == [(n, e["warpgroup"], e["op"]) for n, e in enumerate(ev)],
            "ring: the lanes' boxes are not the trace's steps")
    state = [{"tile": "", "arrivals": 0, "empty": 0, "loads": 0} for _ in range(slots)]
    prev, nxt = d.find_element(by.ID, "ring-prev"), d.find_element(by.ID, "ring-next")
    for _ in range(3):  # the button itself, then the rest of the way back to step 1 in one round trip
        prev.click()
    d.execute_script("for (let k = 0; k < arguments[1]; ++k) arguments[0].click();", prev, len(ev))
    for n, e in enumerate(ev):
        if e["op"] == "load" and e["what"] == "K, V":
            state[e["slot"]].update(tile=str(e["tile"]), arrivals=0, loads=state[e["slot"]]["loads"] + 1)
        if e["op"] == "arrive" and e["what"] == "empty":
            state[e["slot"]]["arrivals"] += 1
            state[e["slot"]]["empty"] += state[e["slot"]]["arrivals"] == C
        status, shown_rows = d.execute_script(
            "return [document.getElementById('ring-status').innerText, [...document.querySelectorAll("
            "'#ring-table tr[data-slot]')].map((e) => Object.assign({}, e.dataset))];")
        step = int(status.split()[1])
        got = [{"tile": r["tile"], "arrivals": int(r["arrivals"]), "empty": int(r["emptyPhases"]), "loads": int(r["loads"])}
               for r in shown_rows]
        f.check(step == n + 1 and got == state, f"ring after step {n + 1}: the page (step {step}) shows {got}, the events give {state}")
        if n == 31:
            d.find_element(by.ID, "view-ring").screenshot(os.path.join(shots, "see-it-run-ring.png"))
        nxt.click()

# ---- split-KV decoding (stage 09) -----------------------------------------------------------
def near(a, b, rel=1e-5):
    """Whether a kernel's fp32 value is the float64 one, to fp32's rounding over a short sum."""
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def softmax_part(q, keys, values, scale):
    """(m, l, unnormalised O) of one row over `keys`, in float64: (−inf, 0, 0) with no key."""
    s = [scale * sum(a * b for a, b in zip(q, k)) for k in keys]
    if not s:
        return -math.inf, 0.0, [0.0] * len(q)
    m = max(s)
    p = [math.exp(x - m) for x in s]
    return m, sum(p), [sum(w * v[c] for w, v in zip(p, values)) for c in range(len(q))]


def check_split_kv(d, by, trace, f, shots):
    SK = trace["split_kv"]
    d.find_element(by.ID, "tab-split-kv").click()
    block = 0
    for b, S in enumerate(SK["sequences"]):
        q, K, V, L = S["q"], S["k"], S["v"], S["length"]
        chunk = SK["chunk"]
        # The splits: chunks of `chunk` keys, numbered sequence after sequence.
        want = [(s, s * chunk, min(L, (s + 1) * chunk)) for s in range(-(-L // chunk))]
        got = [(sp["split"], sp["begin"], sp["end"]) for sp in S["splits"]]
        f.check(got == want, f"split-kv sequence {b}: splits {got}, chunks of {chunk} give {want}")
        f.check([sp["block"] for sp in S["splits"]] == list(range(block, block + len(want))),
                f"split-kv sequence {b}: blocks {[sp['block'] for sp in S['splits']]}")
        block += len(want)
        warp_of = {}
        parts = []
        for sp in S["splits"]:
            wk = sp["warp_keys"]
            for w in range(SK["warps"]):  # warp w: runs of wk keys, every warps·wk keys from begin + w·wk
                keys = [j for j in range(sp["begin"], sp["end"]) if (j - sp["begin"]) // wk % SK["warps"] == w]
                warp_of.update({j: (sp["block"], w) for j in keys})
                m, l, _ = softmax_part(q, [K[j] for j in keys], [V[j] for j in keys], SK["scale"])
                f.check(near(sp["warp_m"][w], m) and near(sp["warp_l"][w], l),
                        f"split-kv block {sp['block']} warp {w}: (m, l) = ({sp['warp_m'][w]}, {sp['warp_l'][w]}), "
                        f"its keys give ({m}, {l})")
            m, l, o = softmax_part(q, K[sp["begin"]:sp["end"]], V[sp["begin"]:sp["end"]], SK["scale"])
            parts.append((m, l, o))
            f.check(near(sp["m"], m) and near(sp["l"], l), f"split-kv block {sp['block']}: (m, l) = ({sp['m']}, "
                    f"{sp['l']}), float64 over its keys ({m}, {l})")
            f.check(all(near(a, w, 1e-4) for a, w in zip(sp["o"], o)), f"split-kv block {sp['block']}: O part is not float64's")
        m_all, l_all, o_all = softmax_part(q, K[:L], V[:L], SK["scale"])
        f.check(near(S["merged"]["m"], m_all) and near(S["merged"]["l"], l_all),
                f"split-kv sequence {b}: the merge kernel's (m, l) = {S['merged']}, float64 ({m_all}, {l_all})")
        f.check(all(abs(a - w / l_all) <= 1e-5 for a, w in zip(S["o"], o_all)), f"split-kv sequence {b}: O is not float64's")

        # The page, for this sequence.
        d.find_element(by.ID, f"skv-seq-{b}").click()
        keys = cells(d, "#skv-keys rect")
        f.check(len(keys) == L, f"split-kv sequence {b}: {len(keys)} keys drawn, not {L}")
        for k in keys:
            j = int(k["key"])
            f.check((int(k["block"]), int(k["warp"])) == warp_of.get(j), f"split-kv sequence {b}: key {j} is drawn in "
                    f"block {k['block']} warp {k['warp']}, the kernel's split gives {warp_of.get(j)}")
        merged_here = cells(d, "#skv-splits td.warps-merged")
        for sp, cell in zip(S["splits"], merged_here):
            f.check(near(float(cell["m"]), sp["m"]) and near(float(cell["l"]), sp["l"]),
                    f"split-kv block {sp['block']}: its warps merged on the page give ({cell['m']}, {cell['l']}), "
                    f"the kernel's block ({sp['m']}, {sp['l']})")
        weights = [float(c["value"]) for c in cells(d, "#skv-merge td.weight")]
        want_w = [0.0 if math.isinf(m) else math.exp(m - m_all) for m, _, _ in parts]
        f.check(len(weights) == len(want_w) and all(near(a, w) for a, w in zip(weights, want_w)),
                f"split-kv sequence {b}: weights shown {weights}, float64 exp(m_s - m) {want_w}")
        for cls, want_v in (("total-m", m_all), ("total-l", l_all), ("kernel-m", m_all), ("kernel-l", l_all)):
            got_v = [float(c["value"]) for c in cells(d, f"#skv-merge td.{cls}")]
            f.check(len(got_v) == 1 and near(got_v[0], want_v), f"split-kv sequence {b}: {cls} shows {got_v}, float64 {want_v}")
        for cls in ("skv-o-here", "skv-o-kernel", "skv-o-reference"):
            got_o = [float(c["value"]) for c in cells(d, f".{cls} .num")]
            f.check(len(got_o) == SK["dim"] and all(abs(a - w / l_all) <= 1e-5 for a, w in zip(got_o, o_all)),
                    f"split-kv sequence {b}: {cls} shows {got_o[:3]}..., float64 {[w / l_all for w in o_all[:3]]}...")
        if b == 0:
            d.find_element(by.ID, "view-split-kv").screenshot(os.path.join(shots, "see-it-run-split-kv.png"))


# ---- the backward pass (stage 10) -----------------------------------------------------------
def check_backward(d, by, trace, f, shots):
    BW = trace["backward"]
    Q, K, V, O, dO, lse = BW["q"], BW["k"], BW["v"], BW["o"], BW["do"], BW["lse"]
    scale, dim, Br, Bc = BW["scale"], BW["dim"], BW["Br"], BW["Bc"]
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    D = [dot(dO[i], O[i]) for i in range(BW["seq_q"])]
    f.check(all(near(a, w) for a, w in zip(BW["D"], D)), "backward: kernel 1's D is not rowsum(dO * O)")

    def pair_math(i0, j0, rows, keys):
        """P, dP, dS, and the pair's additions to dV, dK and dQ, in float64."""
        P = [[math.exp(scale * dot(Q[i0 + r], K[j0 + c]) - lse[i0 + r]) if not BW["causal"] or j0 + c <= i0 + r else 0.0
              for c in range(keys)] for r in range(rows)]
        dP = [[dot(dO[i0 + r], V[j0 + c]) for c in range(keys)] for r in range(rows)]
        dS = [[P[r][c] * (dP[r][c] - D[i0 + r]) for c in range(keys)] for r in range(rows)]
        dV = [[sum(P[r][c] * dO[i0 + r][n] for r in range(rows)) for n in range(dim)] for c in range(keys)]
        dK = [[scale * sum(dS[r][c] * Q[i0 + r][n] for r in range(rows)) for n in range(dim)] for c in range(keys)]
        dQ = [[scale * sum(dS[r][c] * K[j0 + c][n] for c in range(keys)) for n in range(dim)] for r in range(rows)]
        return {"P": P, "dP": dP, "dS": dS, "dV": dV, "dK": dK, "dQ add": dQ}

    def same_matrix(got, want, what, tol=1e-5):
        ok = len(got) == len(want) and all(len(a) == len(w) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, w))
                                           for a, w in zip(got, want))
        return f.check(ok, what)

    # The pairs visited: every (Q tile, K/V tile) with a visible key, block by block, Q tiles in order.
    want_pairs = [(j0 // Bc, i0) for j0 in range(0, BW["seq_kv"], Bc) for i0 in range(0, BW["seq_q"], Br)
                  if not BW["causal"] or min(BW["seq_q"], i0 + Br) - 1 >= j0]
    f.check([(p["block"], p["i"]) for p in BW["pairs"]] == want_pairs,
            f"backward: pairs {[(p['block'], p['i']) for p in BW['pairs']]}, the mask leaves {want_pairs}")
    sums = {}  # block → running dV, dK
    adds = []
    for p in BW["pairs"]:
        w = pair_math(p["i"], p["j"], p["rows"], p["keys"])
        adds.append(w)
        for name in ("P", "dP", "dS", "dQ add"):
            same_matrix(p[name], w[name], f"backward pair ({p['i']}, {p['j']}): the kernel's {name} is not float64's")
        run = sums.setdefault(p["block"], {"dV": None, "dK": None})
        for name in ("dV", "dK"):
            run[name] = w[name] if run[name] is None else [[a + b for a, b in zip(x, y)] for x, y in zip(run[name], w[name])]
            same_matrix(p[name], run[name], f"backward pair ({p['i']}, {p['j']}): the block's {name} so far is not float64's")
    # The gradients written: the pairs' additions summed, every key and query.
    for name, key, rows_of in (("dv", "dV", lambda p: range(p["keys"])), ("dk", "dK", lambda p: range(p["keys"]))):
        for blk, run in sums.items():
            same_matrix(BW[name][blk * Bc:blk * Bc + len(run[key])], run[key], f"backward: {name} of block {blk} is not its sum")
    dq = [[0.0] * dim for _ in range(BW["seq_q"])]
    for p, w in zip(BW["pairs"], adds):
        for r in range(p["rows"]):
            dq[p["i"] + r] = [a + b for a, b in zip(dq[p["i"] + r], w["dQ add"][r])]
    same_matrix(BW["dq"], dq, "backward: dQ is not the sum of the pairs' additions")

    d.find_element(by.ID, "tab-backward").click()
    skipped = sorted((int(c["i"]), int(c["j"])) for c in cells(d, "#bw-grid td.skipped"))
    want_skipped = sorted((i0, j0) for j0 in range(0, BW["seq_kv"], Bc) for i0 in range(0, BW["seq_q"], Br)
                          if (j0 // Bc, i0) not in want_pairs)
    f.check(skipped == want_skipped, f"backward: pairs shown skipped {skipped}, the mask skips {want_skipped}")
    for n, (p, w) in enumerate(zip(BW["pairs"], adds)):
        d.find_element(by.ID, f"bw-pair-{n}").click()
        for name, grid in (("P", "bw-P"), ("dP", "bw-dP"), ("dS", "bw-dS"), ("dV", "bw-dV"), ("dK", "bw-dK"),
                           ("dQ add", "bw-dQ")):
            shown_cells = cells(d, f"#{grid} rect[data-value]")
            got = {}
            for c in shown_cells:
                got.setdefault(int(c["row"]), {})[int(c["col"])] = float(c["value"])
            rows = [[got[r][c] for c in sorted(got[r])] for r in sorted(got)]
            same_matrix(rows, w[name], f"backward pair ({p['i']}, {p['j']}): the page's {name} is not this pair's")
        # A cell's arithmetic: the last row and column of the pair.
        r, c = p["rows"] - 1, p["keys"] - 1
        d.execute_script("document.querySelector(arguments[0]).dispatchEvent(new MouseEvent('click', {bubbles: true}))",
                         f"#bw-P rect[data-row='{r}'][data-col='{c}']")
        marks = cells(d, "#bw-maps rect.mark")
        f.check(len(marks) == 3, f"backward pair ({p['i']}, {p['j']}): {len(marks)} cells outlined, not one in each map")
        cell = cells(d, "#bw-cell")[0]
        f.check((int(cell["row"]), int(cell["col"])) == (p["i"] + r, p["j"] + c) and
                abs(float(cell["ds"]) - w["dS"][r][c]) <= 1e-5 * max(1.0, abs(w["dS"][r][c])),
                f"backward pair ({p['i']}, {p['j']}): the cell line shows query {cell['row']} key {cell['col']} "
                f"dS {cell['ds']}, float64 {w['dS'][r][c]}")
        if n == 0:
            d.find_element(by.ID, "view-backward").screenshot(os.path.join(shots, "see-it-run-backward.png"))


# Planted bugs, one a view: a change to the page's script that the view's check must catch.
PLANTS = [
    ("softmax", "alpha shows exp(x - m)", 'num(s.alpha, "alpha")', 'num(s.term, "alpha")', check_softmax),
    ("grids", "stage 05 marks every other tile skipped", "for (let j = e.j; j < P.seq_kv; j += P.Bc)",
     "for (let j = e.j; j < P.seq_kv; j += 2 * P.Bc)", None),
    ("hbm", "m and l counted as 0 bytes", "O: P.dim, m: 1, l: 1", "O: P.dim, m: 0, l: 0", check_hbm),
    ("fragments", "A's registers a1 and a2 swapped", "return [(lane >> 2) + 8 * (i % 2), 2 * (lane % 4) + (e & 1) + 8 * (i >> 1)]",
     "return [(lane >> 2) + 8 * (i >> 1), 2 * (lane % 4) + (e & 1) + 8 * (i % 2)]", check_fragments),
    ("fragments", "the second shuffle is xor 1 again", "Math.max(v, x1[k ^ 2])", "Math.max(v, x1[k ^ 1])", check_fragments),
    ("swizzle", "banks from element offsets, not bytes", "Math.floor(offset * 2 / 16) % 8", "Math.floor(offset / 16) % 8",
     check_swizzle),
    ("pipeline", "wait_group n leaves n + 1 groups in flight", "while (pending.length > e.n)",
     "while (pending.length > e.n + 1)", check_pipeline),
    ("ring", "empty[slot] completes at the first consumer's arrival", "if (++s.arrivals === R.consumers)",
     "if (++s.arrivals === 1)", check_ring),
    ("split-kv", "a part's weight exp(m - m_s)", "Math.exp(q.m - m)", "Math.exp(m - q.m)", check_split_kv),
    ("split-kv", "keys drawn in runs of one warp too many", "% SK.warps;", "% (SK.warps + 1);", check_split_kv),
    ("backward", "the block's running sums shown as the pair's additions", "x - (before ? before[name][c][n] : 0)", "x",
     check_backward),
    ("backward", "dS computed as P * dP", "(at(\"dP\")[row][col] - BW.D[qi])", "at(\"dP\")[row][col]", check_backward),
]


def check_grids(d, by, trace, f, shots):
    d.find_element(by.ID, "tab-grids").click()
    d.find_element(by.ID, "mask-causal").click()
    check_block(d, by, trace, "05_flash2", True, 0, 5, f)


def run_plants(d, by, page, trace):
    """Each planted bug on a copy of the page: the view's check must fail. Returns the misses."""
    missed = 0
    with open(os.path.join(page, "see-it-run.js")) as fh:
        script = fh.read()
    for n, (view, what, old, new, check) in enumerate(PLANTS):
        if script.count(old) != 1:
            print(f"FAILED: plant '{what}': the script no longer has {old!r} once")
            missed += 1
            continue
        copy = os.path.join(page, f"plant{n}")
        os.makedirs(copy, exist_ok=True)
        for name in ("see-it-run.html", "see-it-run.css", "trace.js"):
            shutil.copyfile(os.path.join(page, name), os.path.join(copy, name))
        with open(os.path.join(copy, "see-it-run.js"), "w") as fh:
            fh.write(script.replace(old, new))
        d.get("file://" + os.path.abspath(os.path.join(copy, "see-it-run.html")))
        try:  # the first failed check is enough: the rest of the view need not be stepped through
            (check or check_grids)(d, by, trace, Failures(first_only=True), copy)
            print(f"MISSED: {view}: {what}")
            missed += 1
        except Caught as first:
            print(f"caught: {view}: {what} (first failed check: {first})")
    return missed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracer", help="see_it_run_trace: make a fresh trace and lay the page out in --out")
    ap.add_argument("--out", help="with --tracer: the folder for the page, its trace and the screenshots")
    ap.add_argument("--page", help="without --tracer: the folder with see-it-run.html and trace.json")
    ap.add_argument("--screenshots", default=None, help="where to save screenshots (default: the page's folder)")
    ap.add_argument("--plants", action="store_true", help="instead: plant a bug in each view's script, expect each caught")
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
    if args.plants:
        try:
            missed = run_plants(d, By, args.page, trace)
        finally:
            d.quit()
        print(f"{len(PLANTS) - missed} of {len(PLANTS)} planted bugs caught")
        return 1 if missed else 0
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
        check_hbm(d, By, trace, f, shots)
        check_fragments(d, By, trace, f, shots)
        check_swizzle(d, By, trace, f, shots)
        check_pipeline(d, By, trace, f, shots)
        check_ring(d, By, trace, f, shots)
        check_split_kv(d, By, trace, f, shots)
        check_backward(d, By, trace, f, shots)

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
