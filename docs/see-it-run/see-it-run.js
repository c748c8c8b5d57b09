/*
 * See it run: the page's views, drawn from a trace that see_it_run_trace wrote.
 *
 * Plain JavaScript and SVG, no library, nothing fetched. Each view is an object
 *
 *     SeeItRun.addView({id: "softmax", title: "Online softmax", render(root, trace) { ... }});
 *
 * whose render() fills `root` (a <section>) from the trace; the tabs list every view. A
 * later stage adds its view the same way, after the trace has the data it needs (the
 * tracer writes the trace; common/trace.h has the trace points the kernels call).
 *
 * The trace (see see_it_run_trace.cpp):
 *   problem  {batch, heads, seq_q, seq_kv, dim, scale, seed, Br, Bc}
 *   softmax  {x, steps: [{x, m, alpha, term, l}], m, l, p, kernel: {m, l, p}, reference: {m, l, p}}
 *   runs     [{stage, causal, model_bytes, blocks: [{block, batch, head, q_tile?, events: [...]}], o, reference}]
 *   events   {op: "load"|"store", what, first, count} or {op: "step"|"skip", j, i, rows?}
 *            where a step's rows are {row: {m, l, alpha | m_tile, l_tile, o: [d]}}
 *   fragments  {stage, dtype, dim, Bc, stride, scale_log2, q, k, v, lanes: {name: [{lane, offset, values}] × 32}}
 *              stage 06's warp 0: "A = Q", "B = K", "B = V" (ldmatrix: offset, 8 values), "S", "P" (C
 *              fragments, Bc/2 values), "row max g", "row max g+8" ([own max, m_new]), "A = P" (8 values)
 *   swizzle  [{variant, dim, rows, places: [[K row, chunk]] a 16-byte place, k, lanes: {"B = K": [...]}}]
 *   pipeline [{variant, dim, seq_q, seq_kv, Bc, events: [{op: "copy", what, first, count, buffer} | {op: "commit"} |
 *            {op: "wait", n} | {op: "barrier"} | {op: "compute", what, tile, buffer}]}]: stage 07's block 0, thread 0
 *   ring     {stage, dim, seq_q, seq_kv, Bc, slots, consumers, events: [{warpgroup, op, what, slot, parity, tile}]}:
 *            stage 08's block 0, the first thread of each warpgroup (0: the producer), in the order they ran
 *   split_kv {stage, dtype, dim, scale, chunk, warps, sequences: [{length, q, k, v, splits: [{block, split, begin,
 *            end, warp_keys, warp_m, warp_l, m, l, o}], merged: {m, l}, o, reference: {o, m, lse}}]}
 *   backward {stage, dtype, dim, seq_q, seq_kv, causal, scale, Br, Bc, q, k, v, o, do, lse, D, pairs: [{block, j,
 *            i, rows, keys, P, dP, dS, "dQ add" (rows × d), dV, dK (keys × d, the block's sums after the pair)}],
 *            dq, dk, dv}
 */
"use strict";

const SeeItRun = (() => {
  const views = [];
  const SVG = "http://www.w3.org/2000/svg";

  // ---- small helpers --------------------------------------------------------------------
  /** JSON has no infinities: the tracer writes "-inf", "inf" and "nan" as strings. */
  function revive(x) {
    if (x === "-inf") return -Infinity;
    if (x === "inf") return Infinity;
    if (x === "nan") return NaN;
    if (Array.isArray(x)) return x.map(revive);
    if (x && typeof x === "object") {
      for (const k of Object.keys(x)) x[k] = revive(x[k]);
    }
    return x;
  }

  /** A number as the page shows it: six significant digits. */
  function fmt(x) {
    if (x === undefined || x === null) return "–";
    if (x === -Infinity) return "−∞";
    if (x === Infinity) return "∞";
    if (Number.isNaN(x)) return "NaN";
    if (x === 0) return "0";
    return String(Number(x.toPrecision(6)));
  }

  /** el("td", {class: "m"}, "text", child, ...): an element with attributes and children. */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  /** The same for SVG elements. */
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  /** A number cell that keeps its full value for anyone who reads the page (the tests). */
  function num(x, cls) {
    return el("td", {class: "num " + (cls || ""), "data-value": String(x)}, fmt(x));
  }

  /** A labelled vector of numbers (an O row), wrapped eight to a line. */
  function vector(label, values, cls) {
    return el("div", {class: "vector " + cls}, el("span", {class: "vector-label"}, label),
      el("div", {class: "vector-cells"}, values.map((x) =>
        el("span", {class: "num", "data-value": String(x)}, fmt(x)))));
  }

  function rowsText(first, count) {
    return count === 1 ? `row ${first}` : `rows ${first}–${first + count - 1}`;
  }

  // ---- view 1: online softmax (stage 02) ------------------------------------------------
  function renderSoftmax(root, trace) {
    const sm = trace.softmax;
    let k = 0;  // steps shown: 0 .. x.length

    root.append(el("h2", {}, "Online softmax (stage 02), one value at a time"),
      el("p", {}, "The running max m and sum l after each value x, with the rescale factor " +
        "alpha = exp(m_old − m_new) that corrects l whenever the max grows. The numbers come from " +
        "stage 02's update(), the step its kernel runs; the default row is the worked example " +
        "x = [2, 1, 4, 1.5, 3]."),
      el("p", {class: "formula"}, "m_new = max(m, x)    alpha = exp(m − m_new)    l = l·alpha + exp(x − m_new)"));

    const values = el("div", {class: "values"});
    const controls = el("div", {class: "controls"},
      el("button", {id: "sm-reset", onclick: () => show(0)}, "Reset"),
      el("button", {id: "sm-prev", onclick: () => show(k - 1)}, "Previous"),
      el("button", {id: "sm-next", onclick: () => show(k + 1)}, "Next step"),
      el("span", {id: "sm-status", class: "status"}));
    const table = el("table", {class: "steps", id: "sm-table"},
      el("thead", {}, el("tr", {}, ["step", "x", "m", "alpha", "exp(x − m)", "l"].map((h) => el("th", {}, h)))));
    const body = el("tbody");
    table.append(body);
    const final = el("div", {id: "sm-final"});
    root.append(values, controls, table, final);

    function show(n) {
      k = Math.max(0, Math.min(sm.x.length, n));
      values.replaceChildren(...sm.x.map((x, i) =>
        el("span", {class: "value" + (i < k - 1 ? " seen" : "") + (i === k - 1 ? " current" : "") +
          (k > 0 && i < k && x === sm.steps[k - 1].m ? " max" : "")}, fmt(x))));
      body.replaceChildren(el("tr", {class: "init"}, el("td", {}, "start"), el("td", {}, ""),
        num(-Infinity), el("td", {}, ""), el("td", {}, ""), num(0)));
      for (let i = 0; i < k; ++i) {
        const s = sm.steps[i];
        const grew = i === 0 || s.m > sm.steps[i - 1].m;
        body.append(el("tr", {id: `sm-row-${i + 1}`, class: (i === k - 1 ? "current" : "") + (grew ? " grew" : "")},
          el("td", {}, i + 1), num(s.x, "x"), num(s.m, "m"), num(s.alpha, "alpha"), num(s.term, "term"),
          num(s.l, "l")));
      }
      const status = root.querySelector("#sm-status");
      if (k === 0) {
        status.textContent = "m = −∞ and l = 0: nothing seen yet.";
      } else {
        const s = sm.steps[k - 1], old = k > 1 ? sm.steps[k - 2] : {m: -Infinity, l: 0};
        status.textContent = s.m > old.m
          ? `x = ${fmt(s.x)} is a new max: l is rescaled by exp(${fmt(old.m)} − ${fmt(s.m)}) = ${fmt(s.alpha)}, ` +
            `then exp(0) = 1 is added: l = ${fmt(old.l)}·${fmt(s.alpha)} + 1 = ${fmt(s.l)}.`
          : `x = ${fmt(s.x)} is below the max ${fmt(s.m)}: alpha = 1, l = ${fmt(old.l)} + ` +
            `exp(${fmt(s.x)} − ${fmt(s.m)}) = ${fmt(s.l)}.`;
      }
      final.replaceChildren();
      if (k === sm.x.length) {
        final.append(el("h3", {}, "The probabilities exp(x − m) / l"),
          el("table", {class: "steps"},
            el("tr", {}, el("th", {}, ""), sm.x.map((x) => el("th", {}, `x = ${fmt(x)}`)), el("th", {}, "m"), el("th", {}, "l")),
            el("tr", {id: "sm-p-update"}, el("td", {}, "value by value (update())"), sm.p.map((p) => num(p, "p")),
              num(sm.m, "m"), num(sm.l, "l")),
            el("tr", {id: "sm-p-kernel"}, el("td", {}, "stage 02's kernel (256 threads, merged)"),
              sm.kernel.p.map((p) => num(p, "p")), num(sm.kernel.m, "m"), num(sm.kernel.l, "l")),
            el("tr", {id: "sm-p-reference"}, el("td", {}, "float64 reference"),
              sm.reference.p.map((p) => num(p, "p")), num(sm.reference.m, "m"), num(sm.reference.l, "l"))),
          el("p", {class: "note"}, "The kernel folds its values in a different order (each thread its own, " +
            "then a merge of the threads' (m, l) pairs), so its last digits may differ from the value-by-value " +
            "order; both match the float64 reference to float precision."));
      }
    }
    show(0);
  }

  // ---- view 2: the grid of blocks, stages 04 and 05 side by side ------------------------
  const STAGES = [
    {id: "04_flash1", title: "Stage 04, FlashAttention-1",
     about: "One block per head. K/V tiles outer, Q tiles inner: after every tile pair the block reads " +
       "m, l and O of the Q tile's rows from HBM and writes them back.",
     state: "HBM", blockName: (b) => `head ${b.head}` + (b.batch ? ` (batch ${b.batch})` : "")},
    {id: "05_flash2", title: "Stage 05, FlashAttention-2",
     about: "One block per Q tile and head. Its Q tile stays on chip, K/V tiles stream past it, and m, l " +
       "and O stay in registers until the one write at the end.",
     state: "registers", blockName: (b) => `Q tile ${b.q_tile}, head ${b.head}` + (b.batch ? `, batch ${b.batch}` : "")},
  ];

  function renderGrids(root, trace) {
    const P = trace.problem;
    root.append(el("h2", {}, "FlashAttention-1 and -2, block by block"),
      el("p", {}, `The same problem for both: B = ${P.batch}, H = ${P.heads}, Nq = ${P.seq_q}, ` +
        `Nkv = ${P.seq_kv}, d = ${P.dim}, tiles of Br = ${P.Br} query rows and Bc = ${P.Bc} keys ` +
        "(a ragged last tile where the length is not a multiple). Click a block in either grid, then step " +
        "through its loop."));
    const mask = el("input", {type: "checkbox", id: "mask-causal"});
    root.append(el("p", {class: "controls"}, el("label", {}, mask, " causal mask (query i sees keys j ≤ i)")));
    const columns = el("div", {class: "columns"});
    root.append(columns);
    const panels = STAGES.map((stage) => {
      const col = el("div", {class: "column", id: `stage-${stage.id}`});
      columns.append(col);
      return new BlockPanel(col, stage, trace);
    });
    const update = () => panels.forEach((p) => p.setRun(mask.checked));
    mask.addEventListener("change", update);
    update();
  }

  /** One stage's grid of blocks and the step-through of the block clicked. */
  class BlockPanel {
    constructor(root, stage, trace) {
      this.root = root;
      this.stage = stage;
      this.trace = trace;
      this.P = trace.problem;
      this.blockIndex = 0;
      this.k = 0;      // events shown: 0 .. events.length
      this.row = 0;    // the query row (within its head) whose values are shown
    }

    setRun(causal) {
      this.run = this.trace.runs.find((r) => r.stage === this.stage.id && r.causal === causal);
      this.select(Math.min(this.blockIndex, this.run.blocks.length - 1));
    }

    select(index) {
      this.blockIndex = index;
      this.block = this.run.blocks[index];
      this.k = 0;
      this.row = this.block.q_tile !== undefined ? this.block.q_tile * this.P.Br : 0;
      this.draw();
    }

    get events() { return this.block.events; }

    /** The rows this block computes (within its head). */
    get rowRange() {
      const P = this.P;
      if (this.block.q_tile === undefined) return [0, P.seq_q];
      const first = this.block.q_tile * P.Br;
      return [first, Math.min(P.seq_q, first + P.Br)];
    }

    draw() {
      const s = this.stage, P = this.P;
      this.root.replaceChildren(el("h3", {}, s.title), el("p", {class: "note"}, s.about));

      // The grid: one cell a block, laid out as the launch numbers them.
      const grid = el("div", {class: "grid", id: `grid-${s.id}`});
      const perRow = this.run.blocks.some((b) => b.q_tile !== undefined) ? Math.ceil(P.seq_q / P.Br) : this.run.blocks.length;
      grid.style.gridTemplateColumns = `repeat(${perRow}, auto)`;
      this.run.blocks.forEach((b, n) => grid.append(el("button",
        {class: "block" + (n === this.blockIndex ? " selected" : ""), "data-block": b.block,
         title: s.blockName(b), onclick: () => this.select(n)}, `block ${b.block}`, el("br"),
        el("small", {}, s.blockName(b)))));
      this.root.append(el("p", {class: "label"}, `The grid: ${this.run.blocks.length} blocks`), grid);

      // The selected block: controls, tile map, memory, event list, values.
      const n = this.events.length;
      const [r0, r1] = this.rowRange;
      const rowInput = el("input", {type: "number", class: "row-input", min: r0, max: r1 - 1, value: this.row,
        onchange: (e) => { this.row = Math.max(r0, Math.min(r1 - 1, Number(e.target.value) || r0)); this.draw(); }});
      this.root.append(el("div", {class: "controls"},
        el("button", {class: "reset", onclick: () => { this.k = 0; this.draw(); }}, "Reset"),
        el("button", {class: "prev", onclick: () => { this.k = Math.max(0, this.k - 1); this.draw(); }}, "Previous"),
        el("button", {class: "next", onclick: () => { this.k = Math.min(n, this.k + 1); this.draw(); }}, "Next step"),
        el("button", {class: "end", onclick: () => { this.k = n; this.draw(); }}, "End"),
        el("span", {class: "step-label"}, `block ${this.block.block}: step ${this.k} of ${n}`),
        el("label", {}, " query row ", rowInput)));
      const current = this.k > 0 ? this.events[this.k - 1] : null;
      this.root.append(el("p", {class: "event-now"}, current ? this.describe(current) : "Not started: press Next step."));
      this.root.append(el("div", {class: "pictures"}, this.tileMap(), this.memory(current)));
      this.root.append(this.values());
      this.root.append(this.eventList());
    }

    /** One event in words. */
    describe(e) {
      const P = this.P;
      switch (e.op) {
        case "load":
          if (e.what === "m, l") return `Read m and l of ${rowsText(e.first, e.count)} from HBM into registers.`;
          if (e.what === "O") return `Read O of ${rowsText(e.first, e.count)} from HBM into registers, to merge with this tile's.`;
          return `Load ${e.what} ${rowsText(e.first, e.count)} from HBM into shared memory.`;
        case "store":
          if (this.stage.state === "HBM" && this.k === 1) {
            return `Initialise O = 0, m = −∞, l = 0 for ${rowsText(e.first, e.count)} in HBM.`;
          }
          return `Write ${e.what} of ${rowsText(e.first, e.count)} to HBM.`;
        case "step":
          return `Tile (Q rows ${e.i}–${Math.min(P.seq_q, e.i + P.Br) - 1}, keys ${e.j}–${Math.min(P.seq_kv, e.j + P.Bc) - 1}): ` +
            (this.stage.state === "HBM"
              ? "S, the tile's own m̃ and l̃, then m, l and O merged with what HBM held."
              : "S, the new running m, alpha = exp(m_old − m_new), l and O = alpha·O + P·V, in registers.");
        case "skip":
          return this.stage.state === "HBM"
            ? `Skip keys ${e.j}– for Q rows ${e.i}–: the whole tile lies above the causal diagonal.`
            : `Stop: keys ${e.j} and later lie above the causal diagonal for every row of this Q tile.`;
        default:
          return e.op;
      }
    }

    /** The head's S matrix as tiles: done, current, skipped, not reached; the causal mask. */
    tileMap() {
      const P = this.P, W = 260, H = Math.max(120, Math.round(W * P.seq_q / P.seq_kv));
      const sx = W / P.seq_kv, sy = H / P.seq_q;
      const pic = svg("svg", {width: W + 50, height: H + 40, class: "tilemap", viewBox: `-40 -20 ${W + 50} ${H + 40}`});
      pic.append(svg("text", {x: 0, y: -6, class: "axis"}, "keys →"),
        svg("text", {x: -36, y: 12, class: "axis"}, "Q ↓"));
      const done = new Set(), skipped = new Set();
      let now = null;
      for (let n = 0; n < this.k; ++n) {
        const e = this.events[n];
        if (e.op === "step") done.add(`${e.j},${e.i}`);
        if (e.op === "skip") {
          if (this.stage.state === "HBM") skipped.add(`${e.j},${e.i}`);
          else for (let j = e.j; j < P.seq_kv; j += P.Bc) skipped.add(`${j},${e.i}`);
        }
        if (n === this.k - 1 && (e.op === "step" || e.op === "skip")) now = `${e.j},${e.i}`;
      }
      const [r0, r1] = this.rowRange;
      for (let i = 0; i < P.seq_q; i += P.Br) {
        for (let j = 0; j < P.seq_kv; j += P.Bc) {
          const key = `${j},${i}`;
          const mine = i >= r0 && i < r1;
          const cls = "tile" + (done.has(key) ? " done" : "") + (skipped.has(key) ? " skipped" : "") +
            (key === now ? " now" : "") + (mine ? "" : " other");
          pic.append(svg("rect", {x: j * sx, y: i * sy, width: Math.min(P.Bc, P.seq_kv - j) * sx,
            height: Math.min(P.Br, P.seq_q - i) * sy, class: cls, "data-tile": key}));
        }
        pic.append(svg("text", {x: -36, y: (i + Math.min(P.Br, P.seq_q - i) / 2) * sy + 4, class: "axis"}, i));
      }
      if (this.run.causal) {  // the masked triangle: key j > query i
        const d = Math.min(P.seq_q, P.seq_kv);
        pic.append(svg("polygon", {points: `0,0 ${P.seq_kv * sx},0 ${P.seq_kv * sx},${Math.min(P.seq_q, P.seq_kv) * sy} ${d * sx},${d * sy}`,
          class: "masked"}));
      }
      pic.append(svg("line", {x1: 0, x2: W, y1: (this.row + 0.5) * sy, y2: (this.row + 0.5) * sy, class: "row-line"}));
      return el("figure", {}, pic, el("figcaption", {}, "S for this head, in tiles: ",
        el("span", {class: "key done"}, "done"), " ", el("span", {class: "key now"}, "this step"), " ",
        el("span", {class: "key skipped"}, "skipped"), this.run.causal ? [" ", el("span", {class: "key masked"}, "masked")] : []));
    }

    /** Where the tensors are, and what the current event moves between HBM and the chip. */
    memory(e) {
      const isFA1 = this.stage.state === "HBM";
      // keys: the tensor names an event's `what` uses; state: where the running m, l, O live.
      const hbm = isFA1
        ? [["Q", "Q"], ["K", "K"], ["V", "V"], ["O", "O", true], ["m", "m", true], ["l", "l", true]]
        : [["Q", "Q"], ["K", "K"], ["V", "V"], ["O", "O (written once)"], ["lse", "lse"]];
      const chip = isFA1
        ? [["Q", "Q tile"], ["K", "K tile"], ["V", "V tile"], ["", "S, P̃ tile"], ["m l O", "m, l read; m̃, l̃, P̃·V (registers)"]]
        : [["Q", "Q tile"], ["K", "K tile"], ["V", "V tile"], ["", "S, P tile"], ["m l O lse", "m, l, O (registers)", true]];
      const moving = new Set(e && (e.op === "load" || e.op === "store") ? e.what.split(", ") : []);
      const box = (title, items, side) => el("div", {class: "mem " + side}, el("div", {class: "mem-title"}, title),
        items.map(([keys, label, state]) => el("div", {class: "tensor" + (state ? " state" : "") +
          (keys.split(" ").some((k) => moving.has(k)) ? " " + e.op : "")}, label)));
      return el("div", {class: "memory"}, box("HBM", hbm, "hbm"),
        el("div", {class: "arrow"}, moving.size ? (e.op === "load" ? "→" : "←") : ""),
        box("on chip", chip, "chip"));
    }

    /** The chosen row's values after the latest step that touched it. */
    values() {
      const P = this.P, out = el("div", {class: "row-values"});
      let last = null, lastIndex = -1;
      for (let n = 0; n < this.k; ++n) {
        const e = this.events[n];
        if (e.op === "step" && e.rows && e.rows[this.row] !== undefined) { last = e; lastIndex = n; }
      }
      const fresh = last && lastIndex === this.k - 1;
      const where = this.stage.state !== "HBM" ? "in the block's registers"
        : fresh ? "as just merged on chip (the next step writes them to HBM)" : "in HBM";
      out.append(el("h4", {}, `Query row ${this.row}: m, l and O ${where}`));
      if (!last) {
        out.append(el("p", {class: "note"}, this.stage.state === "HBM" && this.k > 0
          ? "O = 0, m = −∞, l = 0 (as initialised): no tile has reached this row yet."
          : "m = −∞, l = 0, O = 0: no tile yet."));
      } else {
        const v = last.rows[this.row];
        const names = this.stage.state === "HBM" ? ["m", "l", "m_tile", "l_tile"] : ["m", "alpha", "l"];
        const labels = {m: "m", l: "l", alpha: "alpha", m_tile: "m̃ (tile)", l_tile: "l̃ (tile)"};
        out.append(el("p", {class: "note"}, `after step ${lastIndex + 1}, keys ${last.j}–${Math.min(P.seq_kv, last.j + P.Bc) - 1}`),
          el("table", {class: "stats"}, el("tr", {}, names.map((k) => el("th", {}, labels[k]))),
            el("tr", {}, names.map((k) => num(v[k], "val-" + k)))));
        out.append(vector(this.stage.state === "HBM" ? "O" : "O, not yet divided by l", v.o, "val-o"));
        if (this.stage.state !== "HBM") out.append(vector("O / l", v.o.map((x) => x / v.l), "val-o-div"));
      }
      if (this.k === this.events.length) {  // the end: the kernel's output beside float64
        const bh = this.block.batch * P.heads + this.block.head;
        const flat = bh * P.seq_q + this.row;
        const got = this.run.o[flat], want = this.run.reference.o[flat];
        let worst = 0;
        got.forEach((x, c) => { worst = Math.max(worst, Math.abs(x - want[c])); });
        out.append(el("h4", {}, "The output row, as the kernel wrote it, and the float64 reference"),
          vector("kernel", got, "out-o"), vector("float64", want, "ref-o"),
          el("p", {class: "max-diff", "data-value": String(worst)}, `largest difference: ${worst.toExponential(2)}`));
      }
      return out;
    }

    eventList() {
      const list = el("ol", {class: "events"});
      this.events.forEach((e, n) => {
        const item = el("li", {class: "event" + (n === this.k - 1 ? " current" : "") + (n < this.k ? " seen" : ""),
          onclick: () => { this.k = n + 1; this.draw(); }}, this.describeShort(e));
        list.append(item);
      });
      return el("details", {open: ""}, el("summary", {}, "All steps of this block (click one to jump)"), list);
    }

    describeShort(e) {
      if (e.op === "load" || e.op === "store") return `${e.op} ${e.what} ${rowsText(e.first, e.count)}`;
      return `${e.op} Q ${e.i}… × keys ${e.j}…`;
    }
  }

  // ---- view 3: HBM bytes, stages 04 and 05 ----------------------------------------------
  /** Bytes one load or store event moves: its rows times each tensor's bytes a row (fp32). */
  function eventBytes(e, P) {
    const perRow = {Q: P.dim, K: P.dim, V: P.dim, O: P.dim, m: 1, l: 1, lse: 1};
    return e.what.split(", ").reduce((sum, name) => sum + e.count * perRow[name] * 4, 0);
  }

  /** Bytes read and written by each block of a run, and the running count of one block. */
  function hbmCounts(run, P) {
    return run.blocks.map((b) => {
      let read = 0, written = 0;
      const steps = b.events.filter((e) => e.op === "load" || e.op === "store").map((e) => {
        const n = eventBytes(e, P);
        if (e.op === "load") read += n; else written += n;
        return {e, n, read, written};
      });
      return {block: b, read, written, steps};
    });
  }

  const HBM_MODELS = {
    "04_flash1": "B·H·( 2·Nkv·d·4  [K, V once]  +  ⌈Nkv/Bc⌉·( 3·Nq·d·4  [Q read, O read and written]  +  " +
      "4·Nq·4  [m, l read and written] )  +  Nq·d·4 + 2·Nq·4  [the first O, m, l] )",
    "05_flash2": "B·H·( Nq·d·4  [Q]  +  ⌈Nq/Br⌉·2·Nkv·d·4  [K, V for every Q tile]  +  Nq·d·4  [O]  +  Nq·4  [lse] )",
  };

  function renderHbm(root, trace) {
    const P = trace.problem;
    root.append(el("h2", {}, "HBM bytes: FlashAttention-1 against -2"),
      el("p", {}, "Every load and store each block made, in bytes (fp32: 4 bytes an element), counted from the " +
        "kernels' traces, beside the IO model each stage's hbm_bytes_model() gives. Stage 04 reads and " +
        "writes O, m and l of every Q tile once per K/V tile; stage 05 reads K and V once per Q tile and " +
        "writes O once."));
    const mask = el("input", {type: "checkbox", id: "hbm-causal"});
    root.append(el("p", {class: "controls"}, el("label", {}, mask, " causal mask (tiles above the diagonal are skipped: " +
      "the model still counts them)")));
    const columns = el("div", {class: "columns"});
    root.append(columns);
    const selected = {"04_flash1": 0, "05_flash2": 0};

    function draw() {
      columns.replaceChildren();
      for (const stage of STAGES) {
        const run = trace.runs.find((r) => r.stage === stage.id && r.causal === mask.checked);
        const counts = hbmCounts(run, P);
        const read = counts.reduce((s, c) => s + c.read, 0), written = counts.reduce((s, c) => s + c.written, 0);
        const col = el("div", {class: "column", id: `hbm-${stage.id}`});
        const table = el("table", {class: "steps hbm-blocks"},
          el("tr", {}, ["block", "", "read", "written"].map((h) => el("th", {}, h))),
          counts.map((c, n) => el("tr", {class: "hbm-block" + (n === selected[stage.id] ? " current" : ""),
            "data-block": c.block.block, onclick: () => { selected[stage.id] = n; draw(); }},
            el("td", {}, c.block.block), el("td", {class: "note"}, stage.blockName(c.block)),
            num(c.read, "read"), num(c.written, "written"))),
          el("tr", {class: "hbm-total"}, el("th", {}, "all"), el("th", {}, ""), num(read, "read"), num(written, "written")));
        const total = read + written;
        const ratio = total / run.model_bytes;
        col.append(el("h3", {}, stage.title), table,
          el("p", {}, "Trace: ", el("b", {class: "hbm-trace-total", "data-value": String(total)}, `${total} bytes`),
            ". The model: ", el("b", {class: "hbm-model", "data-value": String(run.model_bytes)}, `${run.model_bytes} bytes`),
            ` (trace / model = ${ratio.toFixed(4)})`),
          el("p", {class: "formula hbm-formula"}, HBM_MODELS[stage.id]),
          el("p", {class: "note"}, `with B = ${P.batch}, H = ${P.heads}, Nq = ${P.seq_q}, Nkv = ${P.seq_kv}, d = ${P.dim}, ` +
            `Br = ${P.Br}, Bc = ${P.Bc}.`));
        const c = counts[selected[stage.id]];
        col.append(el("h4", {}, `Block ${c.block.block} (click another above), load by load`),
          el("div", {class: "scroll"}, el("table", {class: "steps hbm-steps"},
            el("tr", {}, ["", "rows", "bytes", "read so far", "written so far"].map((h) => el("th", {}, h))),
            c.steps.map((s) => el("tr", {class: s.e.op},
              el("td", {}, `${s.e.op} ${s.e.what}`), el("td", {}, rowsText(s.e.first, s.e.count)),
              num(s.n, "bytes"), num(s.read, "read"), num(s.written, "written"))))));
        columns.append(col);
      }
    }
    mask.addEventListener("change", draw);
    draw();
  }

  // ---- view 4: fragments of one mma.sync (stage 06) ------------------------------------
  // The PTX ISA's layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), element e of a
  // lane's registers in order (two 16-bit elements a register, the lower first):
  const LAYOUT = {
    // A 16×16: register i holds row g + 8·(i % 2), columns 2t + 8·(i / 2) and the next.
    A: (lane, e) => { const i = e >> 1; return [(lane >> 2) + 8 * (i % 2), 2 * (lane % 4) + (e & 1) + 8 * (i >> 1)]; },
    // B 16×8 (k × n): register i holds column (n) g, rows (k) 2t + 8·i and the next; an
    // ldmatrix.x4 of K fills two n-tiles, registers 2 and 3 being the second's b0, b1.
    B: (lane, e) => { const i = e >> 1; return [2 * (lane % 4) + (e & 1) + 8 * (i % 2), (lane >> 2) + 8 * (i >> 1)]; },
    // C 16×8 fp32, one value a register: c0, c1 row g, c2, c3 row g + 8, columns 2t and 2t + 1;
    // n-tile n's four follow n-tile n − 1's (s[n][0..3] in the kernel), 8 columns further on.
    C: (lane, e) => [(lane >> 2) + 8 * ((e >> 1) & 1), 2 * (lane % 4) + (e & 1) + 8 * (e >> 2)],
  };
  const REG = {
    A: (e) => `a${e >> 1} ${e & 1 ? "hi" : "lo"}`,
    B: (e) => `b${(e >> 1) % 2} ${e & 1 ? "hi" : "lo"}` + (e >= 4 ? " (n-tile 1)" : ""),
    C: (e) => `c${e % 4}` + (e >= 4 ? ` (n-tile ${e >> 2})` : ""),
  };
  const QUAD_COLOURS = ["#fbb4ae", "#b3cde3", "#ccebc5", "#decbe4", "#fed9a6", "#ffffcc", "#e5d8bd", "#fddaec"];

  /** A matrix as a table: cell (r, c) filled by fill(r, c) → {lane, reg, value} or null. */
  function matrixTable(id, rows, cols, fill, selectedLane, rowLabel, colLabel) {
    const table = el("table", {class: "matrix", id});
    table.append(el("tr", {}, el("th", {}, `${rowLabel} \\ ${colLabel}`), [...Array(cols).keys()].map((c) => el("th", {}, c))));
    for (let r = 0; r < rows; ++r) {
      const tr = el("tr", {}, el("th", {}, r));
      for (let c = 0; c < cols; ++c) {
        const f = fill(r, c);
        tr.append(f === null ? el("td", {}, "") : el("td", {class: "cell" + (f.lane === selectedLane ? " mine" : ""),
          style: `background: ${f.lane === selectedLane ? "" : QUAD_COLOURS[f.lane >> 2]}`,
          "data-row": r, "data-col": c, "data-lane": f.lane, "data-reg": f.reg, "data-value": String(f.value),
          title: `lane ${f.lane}, ${f.reg}: ${fmt(f.value)}`}, f.lane === selectedLane ? fmt(f.value) : f.lane));
      }
      table.append(tr);
    }
    return table;
  }

  /** Where each lane's values sit under layout `kind` (A, B or C): grid[r][c] = {lane, reg, value}. */
  function placeFragments(records, kind, rows, cols) {
    const grid = [...Array(rows)].map(() => Array(cols).fill(null));
    for (const rec of records) {
      rec.values.forEach((value, e) => {
        const [r, c] = LAYOUT[kind](rec.lane, e);
        if (r < rows && c < cols) grid[r][c] = {lane: rec.lane, reg: REG[kind](e), value};
      });
    }
    return grid;
  }

  function renderFragments(root, trace) {
    const F = trace.fragments, L = F.lanes;
    let lane = 0;
    root.append(el("h2", {}, "Fragments: one warp's mma.sync.m16n8k16 (stage 06)"),
      el("p", {}, `Warp 0 of block 0 of stage 06 (fp16, d = ${F.dim}, Bc = ${F.Bc}) on its first K/V tile: what each of ` +
        "its 32 lanes held, from the kernel's own registers on the CPU backend, which follows the PTX ISA's layouts " +
        "(proven against the H100). Cells show the lane that holds them (coloured by quad, the four lanes with the same " +
        "g = lane / 4); pick a lane to see its values."));
    const picker = el("div", {class: "lanes", id: "frag-lanes"});
    const body = el("div");
    root.append(picker, body);

    function draw() {
      picker.replaceChildren(...[...Array(32).keys()].map((n) => el("button", {class: "lane" + (n === lane ? " selected" : ""),
        id: `frag-lane-${n}`, style: `background: ${n === lane ? "" : QUAD_COLOURS[n >> 2]}`, onclick: () => { lane = n; draw(); }}, n)));
      body.replaceChildren();
      const g = lane >> 2, t = lane % 4;
      body.append(el("p", {class: "status", id: "frag-status"}, `Lane ${lane}: g = ${g}, t = ${t}. It holds rows ${g} and ` +
        `${g + 8} of A and C (columns ${2 * t}, ${2 * t + 1}, and ${2 * t + 8}, ${2 * t + 9} of A), and column ${g} of B.`));

      // 1. The three operands of the first product: A = Q (k-step 0), B = K (n-tile 0), C = S (n-tile 0).
      const a = placeFragments(L["A = Q"], "A", 16, 16);
      const b = placeFragments(L["B = K"], "B", 16, 8);
      const cGrid = placeFragments(L.S, "C", 16, 8);
      body.append(el("h3", {}, "Who holds what: A (Q, 16 × 16), B (Kᵀ, 16 × 8), C (S, 16 × 8)"),
        el("div", {class: "pictures"},
          el("figure", {}, matrixTable("frag-a", 16, 16, (r, c) => a[r][c], lane, "row", "k"),
            el("figcaption", {}, "A = Q rows 0-15, d 0-15: four registers a lane, a0-a3")),
          el("figure", {}, matrixTable("frag-b", 16, 8, (r, c) => b[r][c], lane, "k", "n"),
            el("figcaption", {}, "B = Kᵀ, d 0-15 × keys 0-7: b0, b1")),
          el("figure", {}, matrixTable("frag-c", 16, 8, (r, c) => cGrid[r][c], lane, "row", "key"),
            el("figcaption", {}, `C = S, rows 0-15 × keys 0-7, after all ${F.dim / 16} k-steps (fp32): c0-c3`))));

      // 2. ldmatrix: the row address each lane handed it.
      const addr = (name, n) => { const o = L[name][n].offset; return [Math.floor(o / F.stride), o % F.stride]; };
      body.append(el("h3", {}, "ldmatrix: lane 8·i + r hands the address of row r of matrix i"),
        el("p", {class: "note"}, `Tiles in shared memory have rows of ${F.stride} elements (d + 8: the padding). ` +
          "Each lane gives one 16-byte row address; every lane then receives, for matrix i, row lane / 4, columns " +
          "2·(lane % 4) and the next, as its register i. With .trans (V, whose rows are keys, the k of P·V) it " +
          "receives column lane / 4 instead: the transpose."),
        el("table", {class: "steps", id: "frag-ldmatrix"},
          el("tr", {}, ["lane", "matrix", "Q: (row, col)", "K: (row, col)", "V, .trans: (row, col)"].map((h) => el("th", {}, h))),
          [...Array(32).keys()].map((n) => el("tr", {class: n === lane ? "current" : "", "data-lane": n},
            el("td", {}, n), el("td", {}, n >> 3),
            ...["A = Q", "B = K", "B = V"].map((name) => {
              const [r, c] = addr(name, n);
              return el("td", {class: "addr", "data-lane": n, "data-name": name, "data-row": r, "data-col": c}, `(${r}, ${c})`);
            })))));

      // 3. A row's max: each lane's own columns, then two shuffles over the quad; rows g and g + 8.
      const quad = [0, 1, 2, 3].map((k) => 4 * g + k);
      body.append(el("h3", {}, `A row's max, over its quad: rows ${g} and ${g + 8} (lanes ${quad[0]}-${quad[3]})`),
        el("p", {class: "note"}, `Each lane holds ${F.Bc / 4} of a row's ${F.Bc} scores (columns 2t and 2t + 1 of every ` +
          "8-column fragment: c0, c1 for row g, c2, c3 for row g + 8), scaled by scale·log2 e. Its own max, then max " +
          "with lane ^ 1, then with lane ^ 2: two __shfl_xor_sync, and all four lanes hold the row's max."));
      for (const [h, name] of [[0, "row max g"], [1, "row max g+8"]]) {
        const own = quad.map((n) => L[name][n].values[0]);
        const x1 = own.map((v, k) => Math.max(v, own[k ^ 1]));
        const x2 = x1.map((v, k) => Math.max(v, x1[k ^ 2]));
        body.append(el("table", {class: "steps", id: h ? "frag-rowmax-8" : "frag-rowmax"},
          el("tr", {}, el("th", {}, `row ${g + 8 * h}`), quad.map((n) => el("th", {}, `lane ${n}`))),
          el("tr", {}, el("td", {}, "own columns"), own.map((v) => num(v, "own"))),
          el("tr", {}, el("td", {}, "after xor 1"), x1.map((v) => num(v, "x1"))),
          el("tr", {}, el("td", {}, "after xor 2"), x2.map((v) => num(v, "x2"))),
          el("tr", {}, el("td", {}, "the kernel's m_new"), quad.map((n) => num(L[name][n].values[1], "kernel")))));
      }

      // 4. P from C fragments to an A fragment, in registers.
      const pc = placeFragments(L.P, "C", 16, 16);
      const pa = placeFragments(L["A = P"], "A", 16, 16);
      body.append(el("h3", {}, "P stays in registers: two C fragments are one A fragment"),
        el("p", {class: "note"}, "P = 2^(s − m) of keys 0-15, as the softmax left it in the two C fragments of " +
          "n-tiles 0 and 1 (fp32), and the A operand of P·V that a_from_c() packs from them (fp16): each lane's " +
          "values stay where they are, only rounded."),
        el("div", {class: "pictures"},
          el("figure", {}, matrixTable("frag-pc", 16, 16, (r, c) => pc[r][c], lane, "row", "key"),
            el("figcaption", {}, "P in the C fragments of n-tiles 0, 1 (fp32)")),
          el("figure", {}, matrixTable("frag-pa", 16, 16, (r, c) => pa[r][c], lane, "row", "k"),
            el("figcaption", {}, "P as the A operand (fp16): a0-a3"))));
    }
    draw();
  }

  // ---- view 5: the XOR swizzle (stage 07) -----------------------------------------------
  /** A 16-bit element offset's bank group: which 16 bytes of the 128 one wavefront serves. */
  const bankGroup = (offset) => Math.floor(offset * 2 / 16) % 8;

  function renderSwizzle(root, trace) {
    let matrix = 0;
    const SW = trace.swizzle;
    root.append(el("h2", {}, "The XOR swizzle: ldmatrix without bank conflicts (stage 07)"),
      el("p", {}, `Stage 07's first K tile (d = ${SW[0].dim}: rows of 128 bytes) as it lies in shared memory, with its ` +
        "plain-rows variant (no_swizzle) beside it. Shared memory serves 32 banks of 4 bytes a cycle: eight 16-byte " +
        "places, coloured here. Each ldmatrix matrix reads 8 rows of 16 bytes; rows that fall in the same place " +
        "are served one after another. Pick one of the four matrices of warp 0's first ldmatrix of K."));
    const controls = el("div", {class: "controls"}, [0, 1, 2, 3].map((i) => el("button", {id: `swz-matrix-${i}`,
      class: i === matrix ? "selected" : "", onclick: () => { matrix = i; draw(); }}, `matrix ${i} (lanes ${8 * i}-${8 * i + 7})`)));
    const columns = el("div", {class: "columns"});
    root.append(controls, columns);

    function draw() {
      [...controls.children].forEach((b, i) => b.classList.toggle("selected", i === matrix));
      columns.replaceChildren();
      for (const run of SW) {
        const chunks = run.dim / 8;
        const lanes = run.lanes["B = K"].slice(8 * matrix, 8 * matrix + 8);
        const read = new Map(lanes.map((l) => [Math.floor(l.offset / 8), l.lane]));
        const rows = 16;
        const table = el("table", {class: "matrix swizzle", id: `swz-${run.variant}`},
          el("tr", {}, el("th", {}, "row \\ banks"), [...Array(chunks).keys()].map((p) =>
            el("th", {class: `bank${p % 8}`}, `${4 * (p % 8)}-${4 * (p % 8) + 3}`))));
        for (let r = 0; r < rows; ++r) {
          table.append(el("tr", {}, el("th", {}, r), [...Array(chunks).keys()].map((p) => {
            const place = r * chunks + p, [kr, kc] = run.places[place];
            const lane = read.get(place);
            return el("td", {class: `chunk c${kc % 8}` + (lane !== undefined ? " read" : ""), "data-place": place,
              "data-key-row": kr, "data-chunk": kc, title: `K row ${kr}, chunk ${kc} (d ${8 * kc}-${8 * kc + 7})`},
            `${kr}:${kc}`, lane !== undefined ? el("small", {}, ` L${lane}`) : null);
          })));
        }
        const groups = lanes.map((l) => bankGroup(l.offset));
        const perGroup = new Map();
        groups.forEach((gr) => perGroup.set(gr, (perGroup.get(gr) || 0) + 1));
        const ways = Math.max(...perGroup.values());
        columns.append(el("div", {class: "column", id: `swz-col-${run.variant}`},
          el("h3", {}, run.variant === "tuned" ? "Swizzled (the finished kernel)" : "Plain rows (variant no_swizzle)"),
          el("p", {class: "note"}, "Each cell: the K row and 16-byte chunk (8 elements of d) it holds; L: the lane " +
            "whose address reads it. Colours: the chunk."),
          table,
          el("table", {class: "steps swz-lanes"},
            el("tr", {}, ["lane", "K row", "chunk", "byte offset", "banks"].map((h) => el("th", {}, h))),
            lanes.map((l) => {
              const [kr, kc] = run.places[Math.floor(l.offset / 8)];
              const g = bankGroup(l.offset);
              return el("tr", {"data-lane": l.lane}, el("td", {}, l.lane), el("td", {}, kr), el("td", {}, kc),
                el("td", {}, 2 * l.offset), el("td", {class: "banks", "data-group": g}, `${4 * g}-${4 * g + 3}`));
            })),
          el("p", {class: "conflicts", "data-ways": ways, "data-groups": perGroup.size},
            (perGroup.size === 1 ? "8 rows in one bank group: " : `8 rows in ${perGroup.size} different bank groups: `) +
            (ways === 1 ? "no conflict, one wavefront." : `a ${ways}-way conflict, ${ways} wavefronts.`))));
      }
    }
    draw();
  }

  // ---- view 6: the copy pipeline (stage 07) ---------------------------------------------
  /**
   * cp.async's groups, from a thread's events in program order, by the PTX ISA's rule: a commit
   * makes the copies since the last commit one group; wait_group n lands the oldest groups until
   * at most n are pending. Returns the groups {id, copies, committed, landed} (event indices) and,
   * after each event, the groups in flight.
   */
  function cpAsyncGroups(events) {
    const groups = [], pending = [];
    let open = [];
    const inFlight = events.map((e, n) => {
      if (e.op === "copy") open.push(e);
      if (e.op === "commit") {
        const g = {id: groups.length, copies: open, committed: n, landed: null};
        groups.push(g), pending.push(g), open = [];
      }
      if (e.op === "wait") while (pending.length > e.n) pending.shift().landed = n;
      return pending.map((g) => g.id);
    });
    return {groups, inFlight};
  }

  function pipelineText(e) {
    switch (e.op) {
      case "copy": return `cp.async ${e.what} rows ${e.first}–${e.first + e.count - 1}` + (e.buffer >= 0 ? ` → buffer ${e.buffer}` : "");
      case "commit": return "cp.async.commit_group";
      case "wait": return `cp.async.wait_group ${e.n}`;
      case "barrier": return "__syncthreads()";
      case "compute": return `${e.what} on keys ${e.tile}– (buffer ${e.buffer})`;
      default: return e.op;
    }
  }

  function renderPipeline(root, trace) {
    root.append(el("h2", {}, "The copy pipeline: cp.async groups and double buffering (stage 07)"),
      el("p", {}, `Block 0 of stage 07 (fp16, d = ${trace.pipeline[0].dim}) on one Q tile against ${trace.pipeline[0].seq_kv} ` +
        `keys, tiles of ${trace.pipeline[0].Bc}: its steps in program order, as thread 0 ran them on the CPU backend, ` +
        "finished (left) and without the prefetch (variant no_prefetch, right). A commit closes a group of copies; " +
        "wait_group n lets the n newest groups stay in flight and lands the rest; a barrier then makes them visible " +
        "to every thread. The bars are the groups in flight: where a bar spans a compute step, the copy overlaps it."));
    const columns = el("div", {class: "columns"});
    root.append(columns);
    for (const run of trace.pipeline) {
      const {groups, inFlight} = cpAsyncGroups(run.events);
      const n = run.events.length, cw = 13, lane = 18;
      const top = 20, W = n * cw + 110, H = top + (groups.length + 1) * lane + 10;
      const pic = svg("svg", {width: W, height: H, class: "timeline", id: `pipe-svg-${run.variant}`});
      run.events.forEach((e, k) => {
        if (e.op === "barrier") pic.append(svg("line", {x1: 100 + k * cw + cw / 2, x2: 100 + k * cw + cw / 2, y1: top - 4, y2: H - 6,
          stroke: "#999", "stroke-dasharray": "3 2"}));
        if (e.op === "compute") {
          pic.append(svg("rect", {x: 100 + k * cw, y: top, width: cw, height: lane - 3, fill: "#e6550d", class: "compute",
            "data-event": k, "data-tile": e.tile}), svg("title", {}, pipelineText(e)));
        }
      });
      pic.append(svg("text", {x: 2, y: top + 12, "font-size": 11}, "compute"));
      groups.forEach((g, r) => {
        const y = top + (r + 1) * lane, end = g.landed === null ? n : g.landed;
        const label = g.copies.map((c) => c.what === "Q" ? "Q" : `KV ${c.first}`).join(", ") || "(empty)";
        pic.append(svg("text", {x: 2, y: y + 12, "font-size": 11}, `group ${g.id}: ${label}`),
          svg("rect", {x: 100 + g.committed * cw, y, width: (end - g.committed + 1) * cw, height: lane - 3, fill: "#3182bd",
            opacity: 0.75, class: "group", "data-group": g.id, "data-start": g.committed, "data-end": end}));
      });
      const table = el("table", {class: "steps pipe-events", id: `pipe-events-${run.variant}`},
        el("tr", {}, ["step", "thread 0 does", "groups in flight after it"].map((h) => el("th", {}, h))));
      run.events.forEach((e, k) => table.append(el("tr", {class: `op-${e.op}`, "data-event": k,
        "data-in-flight": inFlight[k].join(",")}, el("td", {}, k), el("td", {}, pipelineText(e)),
      el("td", {}, inFlight[k].length ? inFlight[k].map((id) => `group ${id}`).join(", ") : "none"))));
      const overlapped = run.events.filter((e, k) => e.op === "compute" &&
        groups.some((g) => g.committed < k && (g.landed === null || g.landed > k))).length;
      const computes = run.events.filter((e) => e.op === "compute").length;
      columns.append(el("div", {class: "column", id: `pipe-${run.variant}`},
        el("h3", {}, run.variant === "tuned" ? "Finished: tile j+1's copy flies while tile j is computed" :
          "no_prefetch: copy, wait, compute, one after another"),
        el("p", {class: "conflicts", "data-overlapped": overlapped, "data-computes": computes},
          `${overlapped} of ${computes} compute steps run with a copy in flight.`),
        el("div", {class: "scroll-x"}, pic), el("div", {class: "scroll"}, table)));
    }
  }

  // ---- view 7: stage 08's ring of K/V slots ---------------------------------------------
  /**
   * The ring's state after each event: per slot, the K/V tile last loaded into it, the
   * consumers' arrivals on empty[slot] since then, and the phases empty[slot] has completed
   * (one each time all the consumers have arrived).
   */
  function ringStates(R) {
    const slots = [...Array(R.slots).keys()].map(() => ({tile: null, arrivals: 0, emptyPhases: 0, loads: 0}));
    return R.events.map((e) => {
      if (e.op === "load" && e.what === "K, V") Object.assign(slots[e.slot], {tile: e.tile, arrivals: 0, loads: slots[e.slot].loads + 1});
      if (e.op === "arrive" && e.what === "empty") {
        const s = slots[e.slot];
        if (++s.arrivals === R.consumers) s.emptyPhases += 1;
      }
      return slots.map((s) => ({...s}));
    });
  }

  const RING_COLOURS = {load: "#3182bd", wait: "#bdbdbd", issue: "#e6550d", softmax: "#31a354", arrive: "#756bb1",
    turn: "#fdd835", pass: "#fdd835"};

  function ringText(e) {
    const who = e.warpgroup === 0 ? "producer" : `consumer ${e.warpgroup - 1}`;
    switch (e.op) {
      case "load": return e.what === "Q" ? `${who}: TMA Q → Q buffer ${e.slot}` : `${who}: TMA K, V of tile ${e.tile} → slot ${e.slot}`;
      case "wait": return `${who}: ${e.what}[${e.slot}] phase with parity ${e.parity} done` + (e.tile >= 0 ? ` (tile ${e.tile})` : "");
      case "issue": return `${who}: issue ${e.what} of tile ${e.tile} (wgmma, slot ${e.slot})`;
      case "softmax": return `${who}: softmax of S of tile ${e.tile}`;
      case "arrive": return `${who}: arrive on empty[${e.slot}]: done with tile ${e.tile}`;
      case "turn": return `${who}: its turn at the tensor cores`;
      case "pass": return `${who}: passes the turn on`;
      default: return `${who}: ${e.op}`;
    }
  }

  function renderRing(root, trace) {
    const R = trace.ring, states = ringStates(R), n = R.events.length;
    let k = n;
    root.append(el("h2", {}, "Stage 08's ring: producer, mbarriers and two consumers"),
      el("p", {}, `Block 0 of stage 08 (fp16, d = ${R.dim}) on one Q tile of ${R.seq_q} rows against ${R.seq_kv} keys: ` +
        `${R.seq_kv / R.Bc} K/V tiles through a ring of ${R.slots} slots. The producer (warpgroup 0) waits until a slot ` +
        "is empty, then has the TMA copy K and V into it; each consumer (64 query rows) waits on the slot's full " +
        "barriers, issues its wgmma products and arrives on empty[slot] when it is done with it. With ping-pong the " +
        "consumers take turns at issuing (yellow: a turn). Every step is the first thread of a warpgroup, in the order " +
        "the CPU backend ran them: one valid interleaving, not the GPU's timing."));
    const controls = el("div", {class: "controls"},
      el("button", {id: "ring-prev", onclick: () => show(k - 1)}, "Previous"),
      el("button", {id: "ring-next", onclick: () => show(k + 1)}, "Next step"),
      el("button", {id: "ring-end", onclick: () => show(n)}, "End"),
      el("span", {id: "ring-status", class: "status"}));
    const lanes = el("div", {class: "scroll-x"}), ring = el("div", {id: "ring-slots"}), list = el("div", {class: "scroll"});
    root.append(controls, lanes, ring, list);

    function show(m) {
      k = Math.max(1, Math.min(n, m));
      const e = R.events[k - 1];
      root.querySelector("#ring-status").textContent = `step ${k} of ${n}: ${ringText(e)}`;
      // The three lanes; a consumer's turn shaded from its "turn" to its "pass".
      const cw = 14, lane = 26, W = 110 + n * cw, H = 10 + (R.consumers + 1) * lane;
      const pic = svg("svg", {width: W, height: H, id: "ring-lanes"});
      for (let w = 0; w <= R.consumers; ++w) {
        pic.append(svg("text", {x: 2, y: 10 + w * lane + 15, "font-size": 11}, w === 0 ? "producer" : `consumer ${w - 1}`));
      }
      R.events.forEach((x, i) => {
        if (x.op === "turn") {
          const end = R.events.findIndex((y, j) => j > i && y.warpgroup === x.warpgroup && y.op === "pass");
          pic.append(svg("rect", {x: 100 + i * cw, y: 10 + x.warpgroup * lane - 2, width: ((end < 0 ? n : end) - i + 1) * cw,
            height: lane, fill: "#fff59d", class: "turn", "data-warpgroup": x.warpgroup, "data-start": i, "data-end": end}));
        }
      });
      R.events.forEach((x, i) => {
        const box = svg("rect", {x: 100 + i * cw + 1, y: 10 + x.warpgroup * lane + 2, width: cw - 2, height: lane - 8,
          fill: RING_COLOURS[x.op] || "#999", stroke: i === k - 1 ? "#000" : "none", "stroke-width": 2, class: "step",
          "data-event": i, "data-warpgroup": x.warpgroup, "data-op": x.op});
        box.append(svg("title", {}, ringText(x)));
        pic.append(box);
        if (x.tile >= 0 && x.op !== "wait") {
          pic.append(svg("text", {x: 100 + i * cw + cw / 2, y: 10 + x.warpgroup * lane + 15, "font-size": 9, fill: "#fff",
            "text-anchor": "middle"}, x.tile));
        }
      });
      lanes.replaceChildren(pic, el("p", {class: "note"}, Object.entries({load: "TMA copy", wait: "barrier wait passed",
        issue: "wgmma issued", softmax: "softmax", arrive: "arrive on empty"}).map(([op, text]) =>
        el("span", {class: "swatch", style: `background: ${RING_COLOURS[op]}`}, text)), " (numbers: the K/V tile)"));

      // The ring after step k.
      ring.replaceChildren(el("h3", {}, `The ring after step ${k}`), el("table", {class: "steps", id: "ring-table"},
        el("tr", {}, ["slot", "holds K/V tile", "loads into it", `consumers done with it (of ${R.consumers})`,
          "empty[slot]: phases completed"].map((h) => el("th", {}, h))),
        states[k - 1].map((s, i) => el("tr", {"data-slot": i, "data-tile": s.tile === null ? "" : s.tile,
          "data-arrivals": s.arrivals, "data-empty-phases": s.emptyPhases, "data-loads": s.loads},
        el("td", {}, i), el("td", {}, s.tile === null ? "–" : s.tile), el("td", {}, s.loads),
        el("td", {}, s.arrivals), el("td", {}, s.emptyPhases))))),
      el("p", {class: "note"}, "The producer's k-th fill of a slot (k = 0, 1, ...) waits on empty[slot] for parity " +
        "(k & 1) ^ 1: the phase before the first counts as done, so round 0 does not wait. A consumer reading tile t " +
        `waits on k_full and v_full of slot t mod ${R.slots} for parity (t / ${R.slots}) & 1.`);
      list.replaceChildren(el("table", {class: "steps ring-events"},
        el("tr", {}, ["step", "what happened"].map((h) => el("th", {}, h))),
        R.events.map((x, i) => el("tr", {class: i === k - 1 ? "current" : "", "data-event": i},
          el("td", {}, i + 1), el("td", {}, ringText(x))))));
    }
    show(n);
  }

  // ---- view 8: split-KV decoding (stage 09) ---------------------------------------------
  /** Stage 02's merge of parts {m, l}: the total (m, l) and each part's weight e^(m_part − m) (0 if empty). */
  function mergeParts(parts) {
    const m = Math.max(...parts.map((q) => q.m));
    const weights = parts.map((q) => (q.m === -Infinity ? 0 : Math.exp(q.m - m)));
    const l = parts.reduce((sum, q, n) => sum + q.l * weights[n], 0);
    return {m, l, weights};
  }
  const WARP_COLOURS = ["#8dd3c7", "#fdb462", "#bebada", "#fb8072"];

  function renderSplitKv(root, trace) {
    const SK = trace.split_kv;
    let seq = 0;
    root.append(el("h2", {}, "Split-KV decoding: a sequence's splits and their merge (stage 09)"),
      el("p", {}, `Stage 09 (fp32, d = ${SK.dim}) on a batch of ${SK.sequences.length} sequences of ` +
        `${SK.sequences.map((s) => s.length).join(" and ")} keys, one new query each. Every cache is cut into splits ` +
        `of ${SK.chunk} keys (3 for the longest), one block each, numbered sequence after sequence; each of a block's ` +
        `${SK.warps} warps streams its own keys, ${SK.sequences[0].splits[0].warp_keys} at a time. The parts are merged ` +
        "by stage 02's rule twice: the warps' inside a block, then the splits' in the merge kernel. The numbers are the " +
        "kernels' own, from the CPU backend."),
      el("p", {class: "formula"}, "m = max mₛ    wₛ = exp(mₛ − m)    l = Σ wₛ·lₛ    O = Σ wₛ·Oₛ / l"));
    const controls = el("div", {class: "controls"}, SK.sequences.map((s, b) => el("button", {id: `skv-seq-${b}`,
      onclick: () => { seq = b; draw(); }}, `sequence ${b} (${s.length} keys)`)));
    const body = el("div");
    root.append(controls, body);

    function draw() {
      [...controls.children].forEach((b, n) => b.classList.toggle("selected", n === seq));
      const S = SK.sequences[seq];
      body.replaceChildren();

      // 1. The keys: which split (block) and which warp of it reads each.
      const W = 720, H = 34, kw = W / S.length;
      const bar = svg("svg", {width: W + 20, height: H + 34, id: "skv-keys", class: "keybar"});
      for (const sp of S.splits) {
        for (let j = sp.begin; j < sp.end; ++j) {
          const warp = Math.floor((j - sp.begin) / sp.warp_keys) % SK.warps;
          bar.append(svg("rect", {x: 10 + j * kw, y: 4, width: Math.max(kw, 0.6), height: H, fill: WARP_COLOURS[warp],
            "data-key": j, "data-block": sp.block, "data-warp": warp}));
        }
        bar.append(svg("line", {x1: 10 + sp.begin * kw, x2: 10 + sp.begin * kw, y1: 0, y2: H + 8, stroke: "#000", "stroke-width": 2}),
          svg("text", {x: 10 + (sp.begin + sp.end) / 2 * kw, y: H + 24, "text-anchor": "middle", "font-size": 12},
            `block ${sp.block}: keys ${sp.begin}–${sp.end - 1}`));
      }
      body.append(el("h3", {}, `Sequence ${seq}: ${S.length} keys in ${S.splits.length} splits`), bar,
        el("p", {class: "note"}, [...Array(SK.warps).keys()].map((w) =>
          el("span", {class: "swatch", style: `background: ${WARP_COLOURS[w]}`}, `warp ${w}`))));

      // 2. Each split block: its warps' parts, merged into the block's (m, l) and unnormalised O.
      const table = el("table", {class: "steps", id: "skv-splits"},
        el("tr", {}, ["block", "keys", ...[...Array(SK.warps).keys()].map((w) => `warp ${w}: (m, l)`),
          "block (m, l), the kernel's", "merged here from the warps"].map((h) => el("th", {}, h))));
      for (const sp of S.splits) {
        const warps = sp.warp_m.map((m, w) => ({m, l: sp.warp_l[w]}));
        const mine = mergeParts(warps);
        table.append(el("tr", {"data-block": sp.block}, el("td", {}, sp.block), el("td", {}, `${sp.begin}–${sp.end - 1}`),
          warps.map((q, w) => el("td", {class: "pair"}, el("span", {class: "num", "data-value": String(q.m)}, fmt(q.m)), ", ",
            el("span", {class: "num", "data-value": String(q.l)}, fmt(q.l)))),
          el("td", {class: "pair kernel"}, `${fmt(sp.m)}, ${fmt(sp.l)}`),
          el("td", {class: "pair warps-merged", "data-m": String(mine.m), "data-l": String(mine.l)}, `${fmt(mine.m)}, ${fmt(mine.l)}`)));
      }
      body.append(el("h3", {}, "Inside each block: the warps' parts"),
        el("p", {class: "note"}, "A warp's m is the max of its keys' scaled scores, its l the sum of exp(s − m) over them " +
          "(−∞ and 0 for a warp with no key here). The block merges its warps by the rule above."), table);

      // 3. The merge kernel: the splits' parts, their weights, the row's (m, l) and O.
      const total = mergeParts(S.splits);
      const o = S.splits[0].o.map((_, c) => S.splits.reduce((sum, sp, n) => sum + total.weights[n] * sp.o[c], 0) / total.l);
      const merge = el("table", {class: "steps", id: "skv-merge"},
        el("tr", {}, ["split", "block", "mₛ", "lₛ", "wₛ = exp(mₛ − m)", "wₛ·lₛ"].map((h) => el("th", {}, h))));
      S.splits.forEach((sp, n) => merge.append(el("tr", {"data-block": sp.block}, el("td", {}, sp.split), el("td", {}, sp.block),
        num(sp.m, "m"), num(sp.l, "l"), num(total.weights[n], "weight"), num(total.weights[n] * sp.l, "wl"))));
      merge.append(el("tr", {class: "total"}, el("td", {}, "merged here"), el("td", {}, ""), num(total.m, "total-m"),
        el("td", {}, ""), el("td", {}, ""), num(total.l, "total-l")),
      el("tr", {class: "total"}, el("td", {}, "the merge kernel's"), el("td", {}, ""), num(S.merged.m, "kernel-m"),
        el("td", {}, ""), el("td", {}, ""), num(S.merged.l, "kernel-l")));
      body.append(el("h3", {}, "The merge kernel: one row from its splits"), merge,
        vector("Each split's O (unnormalised: Σ exp(s − mₛ)·v over its keys), split 0", S.splits[0].o, "skv-part-o"),
        vector("O = Σ wₛ·Oₛ / l, merged here", o, "skv-o-here"),
        vector("O, the kernel's output", S.o, "skv-o-kernel"),
        vector("O, float64 reference", S.reference.o, "skv-o-reference"));
    }
    draw();
  }

  // ---- view 9: one tile pair of the backward pass (stage 10) ---------------------------
  /** A matrix as an SVG heat map: blue for positive, red for negative, white at 0; `mark` = [row, col] outlined. */
  function heatmap(id, rows, label, mark) {
    const n = rows.length, m = rows[0].length, cell = Math.max(3, Math.min(8, Math.floor(320 / Math.max(n, m))));
    const top = Math.max(1e-30, ...rows.flat().map(Math.abs));
    const pic = svg("svg", {id, class: "heatmap", width: m * cell + 2, height: n * cell + 2});
    rows.forEach((row, r) => row.forEach((x, c) => {
      const t = Math.min(1, Math.abs(x) / top), shade = Math.round(255 * (1 - t));
      pic.append(svg("rect", {x: 1 + c * cell, y: 1 + r * cell, width: cell, height: cell, "data-row": r, "data-col": c,
        "data-value": String(x), fill: x >= 0 ? `rgb(${shade},${shade},255)` : `rgb(255,${shade},${shade})`}));
    }));
    if (mark) {
      pic.append(svg("rect", {class: "mark", x: 1 + mark[1] * cell - 1, y: 1 + mark[0] * cell - 1, width: cell + 2,
        height: cell + 2, fill: "none", stroke: "#000", "stroke-width": 2}));
    }
    return el("figure", {}, pic, el("figcaption", {}, `${label} (${n} × ${m}; |max| ${fmt(top)})`));
  }

  function renderBackward(root, trace) {
    const BW = trace.backward;
    let pick = 0, row = 0, col = 0;
    root.append(el("h2", {}, "The backward pass, one tile pair at a time (stage 10)"),
      el("p", {}, `Stage 10 (fp32, d = ${BW.dim}${BW.causal ? ", causal" : ""}) on one head of ${BW.seq_q} queries and ` +
        `${BW.seq_kv} keys, tiles of Br = ${BW.Br} queries and Bc = ${BW.Bc} keys. One block per K/V tile j keeps dK_j and ` +
        "dV_j on chip and loops over the Q tiles i; for each pair it recomputes P from the forward's log-sum-exp and adds " +
        "to dV_j, dK_j and (atomically, shared with every other block) dQ_i. Pick a tile pair, then a cell of P."),
      el("p", {class: "formula"}, "P = exp(scale·QKᵀ − lse)   dP = dO·Vᵀ   dS = P ∘ (dP − D), D = rowsum(dO ∘ O)   " +
        "dV += Pᵀ·dO   dK += scale·dSᵀ·Q   dQ += scale·dS·K"));
    const pairsBox = el("div", {class: "controls", id: "bw-pairs"});
    const body = el("div");
    root.append(pairsBox, body);

    function draw() {
      const pair = BW.pairs[pick];
      const qTiles = Math.ceil(BW.seq_q / BW.Br), kTiles = Math.ceil(BW.seq_kv / BW.Bc);
      // The pairs, Q tiles down and K/V tiles across: visited, or skipped (no key visible).
      const grid = el("table", {class: "steps", id: "bw-grid"},
        el("tr", {}, el("th", {}, "Q tile \\ K/V tile (block)"), [...Array(kTiles).keys()].map((j) =>
          el("th", {}, `keys ${j * BW.Bc}– (block ${j})`))));
      for (let i = 0; i < qTiles; ++i) {
        grid.append(el("tr", {}, el("th", {}, `queries ${i * BW.Br}–`), [...Array(kTiles).keys()].map((j) => {
          const n = BW.pairs.findIndex((q) => q.i === i * BW.Br && q.j === j * BW.Bc);
          return n < 0 ? el("td", {class: "skipped", "data-i": i * BW.Br, "data-j": j * BW.Bc}, "skipped")
            : el("td", {"data-i": i * BW.Br, "data-j": j * BW.Bc}, el("button", {id: `bw-pair-${n}`,
              class: n === pick ? "selected" : "", onclick: () => { pick = n; row = col = 0; draw(); }},
            `step ${BW.pairs.filter((q, m) => q.block === BW.pairs[n].block && m <= n).length} of block ${BW.pairs[n].block}`));
        })));
      }
      pairsBox.replaceChildren(grid);

      // This pair's P, dP, dS; a cell's arithmetic.
      const at = (name) => pair[name];
      row = Math.min(row, pair.rows - 1), col = Math.min(col, pair.keys - 1);
      const qi = pair.i + row, kj = pair.j + col;
      const dsHere = at("P")[row][col] * (at("dP")[row][col] - BW.D[qi]);
      const maps = el("div", {class: "pictures", id: "bw-maps"},
        heatmap("bw-P", at("P"), "P", [row, col]), heatmap("bw-dP", at("dP"), "dP", [row, col]),
        heatmap("bw-dS", at("dS"), "dS", [row, col]));
      maps.addEventListener("click", (e) => {
        const r = e.target.getAttribute && e.target.getAttribute("data-row");
        if (r !== null && r !== undefined) { row = Number(r); col = Number(e.target.getAttribute("data-col")); draw(); }
      });
      body.replaceChildren(el("h3", {}, `Tile pair: queries ${pair.i}–${pair.i + pair.rows - 1}, keys ${pair.j}–` +
        `${pair.j + pair.keys - 1} (block ${pair.block})`), maps,
      el("p", {class: "status", id: "bw-cell", "data-row": qi, "data-col": kj, "data-ds": String(dsHere)},
        `Query ${qi}, key ${kj}: P = ${fmt(at("P")[row][col])}, dP = ${fmt(at("dP")[row][col])}, D = ${fmt(BW.D[qi])}; ` +
        `P·(dP − D) = ${fmt(dsHere)}, the kernel's dS = ${fmt(at("dS")[row][col])}.`));

      // What the pair adds: dV_j and dK_j (the block's running sums, less the previous pair's), dQ_i.
      const before = BW.pairs.slice(0, pick).filter((q) => q.block === pair.block).pop();
      const added = (name) => at(name).map((r, c) => r.map((x, n) => x - (before ? before[name][c][n] : 0)));
      body.append(el("h3", {}, "What this pair adds"),
        el("p", {class: "note"}, before
          ? `dV_j and dK_j are the block's running sums: after this pair less after its previous one (queries ${before.i}–).`
          : "This is the block's first pair: dV_j and dK_j start from 0."),
        el("div", {class: "pictures"}, heatmap("bw-dV", added("dV"), "dV_j += Pᵀ·dO_i (keys × d)"),
          heatmap("bw-dK", added("dK"), "dK_j += scale·dSᵀ·Q_i (keys × d)"),
          heatmap("bw-dQ", at("dQ add"), "dQ_i += scale·dS·K_j (queries × d, atomic)")));
    }
    draw();
  }

  // ---- the page ------------------------------------------------------------------------
  function addView(view) { views.push(view); }

  addView({id: "softmax", title: "Online softmax (stage 02)", render: renderSoftmax});
  addView({id: "grids", title: "FlashAttention-1 vs -2 (stages 04, 05)", render: renderGrids});
  addView({id: "hbm", title: "HBM bytes (stages 04, 05)", render: renderHbm});
  addView({id: "fragments", title: "Fragments (stage 06)", render: renderFragments});
  addView({id: "swizzle", title: "Swizzle (stage 07)", render: renderSwizzle});
  addView({id: "pipeline", title: "Pipeline (stage 07)", render: renderPipeline});
  addView({id: "ring", title: "Ring (stage 08)", render: renderRing});
  addView({id: "split-kv", title: "Split-KV (stage 09)", render: renderSplitKv});
  addView({id: "backward", title: "Backward (stage 10)", render: renderBackward});

  function start(trace, source) {
    trace = revive(trace);
    document.getElementById("trace-source").textContent = `Trace: ${source}; seed ${trace.problem.seed}.`;
    const tabs = document.getElementById("view-tabs"), main = document.getElementById("views");
    tabs.replaceChildren();
    main.replaceChildren();
    const sections = views.map((v) => {
      const section = el("section", {id: `view-${v.id}`, "data-view": v.id});
      v.render(section, trace);
      main.append(section);
      return section;
    });
    const pick = (n) => {
      sections.forEach((s, m) => { s.hidden = m !== n; });
      [...tabs.children].forEach((t, m) => t.classList.toggle("active", m === n));
    };
    views.forEach((v, n) => tabs.append(el("button", {id: `tab-${v.id}`, onclick: () => pick(n)}, v.title)));
    pick(0);
  }

  function missing() {
    document.getElementById("trace-source").textContent =
      "No trace.js beside this page yet. Make one with `cmake --workflow --preset see-it-run` " +
      "and open build-see-it-run/see-it-run/see-it-run.html, or open a trace.json above.";
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("trace-file").addEventListener("change", (e) => {
      const file = e.target.files[0];
      if (!file) return;
      file.text().then((text) => start(JSON.parse(text), file.name));
    });
  });

  return {addView, start, missing, fmt};
})();
