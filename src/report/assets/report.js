// nlg-judge report: draws the page from the JSON in #report-data. Every text of the data
// goes into the page through textContent or canvas text, never as markup.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const main = document.getElementById("main");
  const tabs = document.getElementById("tabs");
  const tip = document.getElementById("tooltip");
  const hasSections = document.getElementById("sections") !== null;
  const PAGE = 100; // context table rows per page
  // What each rubric format outcome means (the badge's tooltip).
  const FORMATS = {
    kept: "kept to the format: the result marker once, then a score",
    "no-score": "wrote the result marker without a score of the scale after it",
    repeated: "wrote the result marker more than once (the score is read after the first)",
    missing: "never wrote the result marker (appended after the feedback; the score is read there)",
    cut: "cut at the token limit before the marker (appended; the score is read there)",
  };

  // Relative grading reads A or B where absolute grading reads a score.
  const PAIR_FORMATS = Object.assign({}, FORMATS, {
    kept: "kept to the format: the result marker once, then A or B",
    "no-score": "wrote the result marker without A or B after it",
    missing: "never wrote the result marker (appended after the feedback; the choice is read there)",
    cut: "cut at the token limit before the marker (appended; the choice is read there)",
  });
  // A judge that may call a tie chooses among three.
  const TIE_FORMATS = Object.assign({}, PAIR_FORMATS, {
    kept: "kept to the format: the result marker once, then A, B or a tie",
    "no-score": "wrote the result marker without A, B or a tie after it",
  });
  const pairFormats = (r) => (r.p_tie ? TIE_FORMATS : PAIR_FORMATS);
  // P(tie) of candidate i shown first against j in a context's results, or -1.
  const tieAt = (r, n, i, j) => (r.p_tie ? r.p_tie[i * n + j] : -1);
  function badge(f, titles) {
    return f ? h("span", { class: "badge" + (f === "kept" ? "" : " warn"), title: (titles || FORMATS)[f] || f, text: f }) : null;
  }

  // ---------- small helpers ----------
  function h(tag, props, ...kids) {
    const node = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "text") node.textContent = v;
        else if (k === "class") node.className = v;
        else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
        else if (k === "style") node.style.cssText = v;
        else node.setAttribute(k, v === true ? "" : v);
      }
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }
  const SVGNS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, text) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const isNum = (x) => typeof x === "number" && isFinite(x);
  function fmt(x, d) {
    if (!isNum(x)) return "–";
    const t = x.toFixed(d === undefined ? 3 : d);
    return /^-0\.?0*$/.test(t) ? t.slice(1) : t;
  }
  const frac = (f) => (f && f[1] > 0 ? f[0] / f[1] : null);
  const pct = (f) => (f && f[1] > 0 ? fmt(f[0] / f[1], 3) : "–");
  const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  function niceTicks(lo, hi, target) {
    const span = Math.max(hi - lo, 1e-9);
    const raw = span / Math.max(target, 1);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw) || 10 * p;
    const out = [];
    for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + 1e-9; k++) out.push(k * step);
    return { ticks: out, step };
  }
  const tickText = (v, step) => fmt(v, step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step) - 1e-9)));
  // Diverging ramp for probabilities: blue (0) - light grey (0.5) - red (1).
  const STOPS = [[0, [33, 102, 172]], [0.25, [146, 197, 222]], [0.5, [245, 245, 245]], [0.75, [244, 165, 130]], [1, [178, 24, 43]]];
  // `centre` maps to the ramp's middle (0.5, or a debiased run's threshold).
  function pColor(p, centre) {
    p = Math.min(1, Math.max(0, p));
    const c = centre === undefined ? 0.5 : Math.min(0.999, Math.max(0.001, centre));
    p = p < c ? 0.5 * (p / c) : 0.5 + 0.5 * ((p - c) / (1 - c));
    for (let k = 1; k < STOPS.length; k++) {
      if (p <= STOPS[k][0]) {
        const [a, ca] = STOPS[k - 1], [b, cb] = STOPS[k];
        const t = (p - a) / (b - a);
        const c = ca.map((v, i) => Math.round(v + (cb[i] - v) * t));
        return `rgb(${c[0]},${c[1]},${c[2]})`;
      }
    }
    return "rgb(178,24,43)";
  }
  const ramp = () => `linear-gradient(90deg, ${STOPS.map(([t]) => pColor(t) + " " + t * 100 + "%").join(", ")})`;
  function showTip(event, lines) {
    tip.replaceChildren(...lines.map((l, i) => h("div", null, i === 0 ? h("b", { text: l }) : l)));
    tip.style.display = "block";
    const pad = 14;
    let x = event.clientX + pad, y = event.clientY + pad;
    const r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 4) x = event.clientX - r.width - pad;
    if (y + r.height > window.innerHeight - 4) y = event.clientY - r.height - pad;
    tip.style.left = Math.max(4, x) + "px";
    tip.style.top = Math.max(4, y) + "px";
  }
  const hideTip = () => { tip.style.display = "none"; };
  // A canvas sized in CSS pixels, drawn at the screen's resolution.
  function canvas(width, height, label) {
    const c = h("canvas", { role: "img", "aria-label": label });
    const ratio = window.devicePixelRatio || 1;
    c.width = Math.round(width * ratio);
    c.height = Math.round(height * ratio);
    c.style.width = width + "px";
    c.dataset.width = width;
    const ctx = c.getContext("2d");
    ctx.scale(ratio, ratio);
    ctx.font = "12px " + getComputedStyle(document.body).fontFamily;
    return { c, ctx };
  }
  function cut(ctx, text, room) {
    if (ctx.measureText(text).width <= room) return text;
    let t = text;
    while (t.length > 1 && ctx.measureText(t + "…").width > room) t = t.slice(0, -1);
    return t + "…";
  }
  function widthOf(node, fallback) {
    const w = node.clientWidth;
    return w > 0 ? w : fallback;
  }
  // Deterministic jitter in [-0.5, 0.5) from two integers.
  function jitter(a, b) {
    let x = (a * 374761393 + b * 668265263) | 0;
    x = Math.imul(x ^ (x >>> 13), 1274126177);
    return (((x ^ (x >>> 16)) >>> 0) / 4294967296) - 0.5;
  }

  // ---------- charts ----------
  // Axes on a canvas: returns the data-to-pixel maps.
  function axes(ctx, box, xr, yr, xlabel, ylabel) {
    const { t, hh } = box;
    let { l, w } = box;
    const yt = niceTicks(yr[0], yr[1], Math.max(4, Math.floor(hh / 40)));
    // The y title stands left of the widest tick label, never over it: the plot moves
    // right where the labels need the room.
    const widest = Math.max(0, ...yt.ticks.map((v) => ctx.measureText(tickText(v, yt.step)).width));
    const room = Math.ceil(widest) + 6 + 20;
    if (l < room) { w -= room - l; l = room; }
    const titleX = l - 6 - widest - 12;
    // For the browser check: the title's right edge and the tick labels' left edge.
    ctx.canvas.dataset.ytitleRight = String(Math.ceil(titleX + 8));
    ctx.canvas.dataset.yticksLeft = String(Math.floor(l - 6 - widest));
    const X = (v) => l + ((v - xr[0]) / (xr[1] - xr[0])) * w;
    const Y = (v) => t + hh - ((v - yr[0]) / (yr[1] - yr[0])) * hh;
    ctx.strokeStyle = "#e6e9ef";
    ctx.fillStyle = "#5d6677";
    ctx.lineWidth = 1;
    const xt = niceTicks(xr[0], xr[1], Math.max(3, Math.floor(w / 70)));
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const v of xt.ticks) {
      const x = Math.round(X(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, t); ctx.lineTo(x, t + hh); ctx.stroke();
      ctx.fillText(tickText(v, xt.step), x, t + hh + 5);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of yt.ticks) {
      const y = Math.round(Y(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(l, y); ctx.lineTo(l + w, y); ctx.stroke();
      ctx.fillText(tickText(v, yt.step), l - 6, y);
    }
    ctx.strokeStyle = "#9aa3b2";
    ctx.strokeRect(l + 0.5, t + 0.5, w, hh);
    ctx.fillStyle = "#1d2330";
    ctx.textAlign = "center";
    ctx.textBaseline = "alphabetic";
    ctx.fillText(xlabel, l + w / 2, t + hh + 34);
    ctx.save();
    ctx.translate(titleX, t + hh / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText(cut(ctx, ylabel, hh), 0, 0);
    ctx.restore();
    return { X, Y };
  }

  // Histogram of values in [lo, hi] as SVG (a few dozen bars), with marked lines.
  function histogram(values, opts) {
    const { lo, hi, bins, xlabel, marks, width } = opts;
    // The marks' labels stand in a band above the bars (one line each), never over them.
    const labelled = (marks || []).filter((mk) => isNum(mk.x)).length;
    const height = 190 + 14 * labelled, m = { l: 44, r: 12, t: 8 + 14 * labelled, b: 40 };
    const counts = new Array(bins).fill(0);
    for (const v of values) {
      if (!isNum(v)) continue;
      const k = Math.min(bins - 1, Math.max(0, Math.floor(((v - lo) / (hi - lo)) * bins)));
      counts[k]++;
    }
    const top = Math.max(1, ...counts);
    const w = width - m.l - m.r, hh = height - m.t - m.b;
    const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": xlabel, style: "max-width:100%;height:auto" });
    const X = (v) => m.l + ((v - lo) / (hi - lo)) * w;
    const Y = (c) => m.t + hh - (c / top) * hh;
    const yt = niceTicks(0, top, 4);
    for (const v of yt.ticks) {
      if (v !== Math.round(v)) continue;
      svg.append(s("line", { x1: m.l, x2: m.l + w, y1: Y(v), y2: Y(v), stroke: "#e6e9ef" }));
      svg.append(s("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#5d6677" }, String(v)));
    }
    counts.forEach((c, k) => {
      if (!c) return;
      const x0 = X(lo + (k / bins) * (hi - lo)), x1 = X(lo + ((k + 1) / bins) * (hi - lo));
      const bar = s("rect", { x: x0 + 0.5, y: Y(c), width: Math.max(1, x1 - x0 - 1), height: m.t + hh - Y(c), fill: opts.color || "#4a78b5", rx: 1 });
      bar.append(s("title", {}, `${fmt(lo + (k / bins) * (hi - lo), 2)}–${fmt(lo + ((k + 1) / bins) * (hi - lo), 2)}: ${c}`));
      svg.append(bar);
    });
    const xt = niceTicks(lo, hi, Math.max(3, Math.floor(w / 60)));
    for (const v of xt.ticks) svg.append(s("text", { x: X(v), y: m.t + hh + 15, "text-anchor": "middle", "font-size": 11, fill: "#5d6677" }, tickText(v, xt.step)));
    svg.append(s("line", { x1: m.l, x2: m.l + w, y1: m.t + hh + 0.5, y2: m.t + hh + 0.5, stroke: "#9aa3b2" }));
    svg.append(s("text", { x: m.l + w / 2, y: height - 6, "text-anchor": "middle", "font-size": 12, fill: "#1d2330" }, xlabel));
    (marks || []).filter((mk) => isNum(mk.x)).forEach((mk, i) => {
      const x = X(mk.x);
      const y = 4 + 11 + i * 14;
      svg.append(s("line", { x1: x, x2: x, y1: y + 3, y2: m.t + hh, stroke: mk.color, "stroke-width": 2, "stroke-dasharray": mk.dash ? "5 4" : "" }));
      const anchor = x > m.l + w * 0.7 ? "end" : "start";
      svg.append(s("text", { x: x + (anchor === "end" ? -4 : 4), y, "text-anchor": anchor, "font-size": 11, fill: mk.color, "font-weight": 600 }, mk.label));
    });
    return svg;
  }

  // Scatter on a canvas: points [{x, y, label}], hover shows the label.
  function scatter(points, opts) {
    const width = opts.width, height = opts.height || 300;
    const box = { l: 52, t: 12, w: width - 52 - 14, hh: height - 12 - 46 };
    const { c, ctx } = canvas(width, height, opts.title || "scatter");
    const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
    const pad = (lo, hi) => { const d = hi - lo || Math.abs(hi) || 1; return [lo - d * 0.06, hi + d * 0.06]; };
    const xr = opts.xr || pad(Math.min(...xs), Math.max(...xs));
    const yr = opts.yr || pad(Math.min(...ys), Math.max(...ys));
    const { X, Y } = axes(ctx, box, xr, yr, opts.xlabel, opts.ylabel);
    if (opts.under) opts.under(ctx, X, Y);
    const radius = points.length > 2000 ? 1.6 : points.length > 300 ? 2.4 : 3.6;
    ctx.fillStyle = opts.color || "rgba(31,95,168,0.55)";
    const drawn = points.map((p) => {
      const px = X(p.x + (p.jx || 0)), py = Y(p.y + (p.jy || 0));
      ctx.beginPath(); ctx.arc(px, py, radius, 0, 2 * Math.PI); ctx.fill();
      return [px, py];
    });
    const wrap = h("div", { class: "chart" }, c);
    if (points.length <= 5000) {
      c.addEventListener("mousemove", (e) => {
        const r = c.getBoundingClientRect();
        const mx = ((e.clientX - r.left) / r.width) * width, my = ((e.clientY - r.top) / r.height) * height;
        let best = -1, bd = 64;
        drawn.forEach(([px, py], k) => { const d = (px - mx) ** 2 + (py - my) ** 2; if (d < bd) { bd = d; best = k; } });
        if (best >= 0) showTip(e, points[best].label()); else hideTip();
      });
      c.addEventListener("mouseleave", hideTip);
      if (opts.onclick) c.addEventListener("click", (e) => {
        const r = c.getBoundingClientRect();
        const mx = ((e.clientX - r.left) / r.width) * width, my = ((e.clientY - r.top) / r.height) * height;
        let best = -1, bd = 64;
        drawn.forEach(([px, py], k) => { const d = (px - mx) ** 2 + (py - my) ** 2; if (d < bd) { bd = d; best = k; } });
        if (best >= 0) opts.onclick(points[best]);
      });
    }
    return wrap;
  }

  // Both orders of each pair: x = P(i wins shown first), y = P(j wins shown first).
  function orderScatter(pairs, width, onclick) {
    return scatter(pairs, {
      onclick,
      width, height: Math.min(360, width * 0.8), xr: [0, 1], yr: [0, 1], title: "both orders of each pair",
      xlabel: "P(first wins), one order", ylabel: "P(first wins), other order",
      color: pairs.length > 2000 ? "rgba(31,95,168,0.25)" : "rgba(31,95,168,0.6)",
      under: (ctx, X, Y) => {
        ctx.fillStyle = "rgba(178,24,43,0.07)";
        ctx.fillRect(X(0.5), Y(1), X(1) - X(0.5), Y(0.5) - Y(1));
        ctx.fillStyle = "rgba(33,102,172,0.07)";
        ctx.fillRect(X(0), Y(0.5), X(0.5) - X(0), Y(0) - Y(0.5));
        ctx.strokeStyle = "#6b7688"; ctx.setLineDash([5, 4]);
        ctx.beginPath(); ctx.moveTo(X(0), Y(1)); ctx.lineTo(X(1), Y(0)); ctx.stroke();
        ctx.setLineDash([]);
        ctx.font = "11px " + getComputedStyle(document.body).fontFamily;
        ctx.textAlign = "right"; ctx.textBaseline = "top"; ctx.fillStyle = "#b2182b";
        ctx.fillText("first position wins both", X(1) - 4, Y(1) + 4);
        ctx.textAlign = "left"; ctx.textBaseline = "bottom"; ctx.fillStyle = "#2166ac";
        ctx.fillText("second position wins both", X(0) + 4, Y(0) - 4);
        ctx.font = "12px " + getComputedStyle(document.body).fontFamily;
      },
    });
  }

  // ---------- state ----------
  let state = { view: "summary", run: 0, ctx: 0, page: 1, sort: null, filter: "" };
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    const run = Math.min(Math.max(parseInt(p.get("run") || "0", 10) || 0, 0), Math.max(D.runs.length - 1, 0));
    const ctx = Math.min(Math.max(parseInt(p.get("c") || "0", 10) || 0, 0), Math.max(D.contexts.length - 1, 0));
    let view = p.get("view") || (D.runs.length ? "summary" : "tables");
    if (!["summary", "context", "tables"].includes(view)) view = "summary";
    if (view === "tables" && !hasSections) view = "summary";
    if (view !== "tables" && !D.runs.length) view = "tables";
    state.view = view; state.run = run; state.ctx = ctx;
  }
  function go(changes) {
    const next = Object.assign({ view: state.view, run: state.run, c: state.ctx }, changes);
    const p = new URLSearchParams();
    p.set("view", next.view);
    if (D.runs.length > 1) p.set("run", next.run);
    if (next.view === "context") p.set("c", next.c);
    location.hash = p.toString();
  }
  const run = () => D.runs[state.run];

  // ---------- derived numbers ----------
  function contextStats(k) {
    const r = run().contexts[k], ctx = D.contexts[k];
    const order = r.ranks.map((rank, i) => i).sort((a, b) => r.ranks[a] - r.ranks[b] || a - b);
    return { r, ctx, order, best: ctx.candidates[order[0]] };
  }
  function pairsOf(r, n, limit) {
    const out = [];
    if (!r.matrix) return out;
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) {
      const a = r.matrix[i * n + j], b = r.matrix[j * n + i];
      if (a >= 0 && b >= 0) out.push([i, j, a / 1e6, b / 1e6]);
      if (limit && out.length >= limit) return out;
    }
    return out;
  }

  // ---------- pages ----------
  function header() {
    tabs.replaceChildren();
    const link = (view, label) => h("a", { href: "#", class: state.view === view ? "on" : "", onclick: (e) => { e.preventDefault(); go({ view }); } }, label);
    if (D.runs.length) {
      tabs.append(link("summary", "Summary"));
      if (D.contexts.length) tabs.append(link("context", "Contexts"));
    }
    if (hasSections) tabs.append(link("tables", "Tables & figures"));
    if (D.runs.length > 1 && state.view !== "tables") {
      const pick = h("select", { "aria-label": "run", onchange: (e) => go({ run: parseInt(e.target.value, 10) }) },
        D.runs.map((r, i) => h("option", { value: i, selected: i === state.run }, r.name)));
      tabs.append(h("label", { class: "run-pick" }, "Judgement:", pick));
    }
  }

  function kpi(label, value, sub, warn) {
    return h("div", { class: "kpi" + (warn ? " warn" : "") }, h("div", { class: "label", text: label }), h("div", { class: "value", text: value }), sub ? h("div", { class: "sub", text: sub }) : null);
  }

  function summary() {
    const R = run();
    const page = [];
    const n = D.contexts.length;
    const cands = D.contexts.reduce((a, c) => a + c.candidates.length, 0);
    const comps = R.contexts.reduce((a, c) => a + (c.matrix ? c.matrix.filter((v) => v >= 0).length : 0), 0);
    for (const note of D.notes) page.push(h("div", { class: "note", text: note }));
    const facts = h("dl", { class: "facts" }, D.facts.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })]));
    const kpis = h("div", { class: "kpis" });
    kpis.append(kpi("Contexts", String(n), `${cands} candidates${comps ? `, ${comps} comparisons` : ""}`));
    if (R.kind === "pairwise") {
      const pa = frac(R.first_position), raw = frac(R.first_position_raw);
      const biased = isNum(raw) && Math.abs(raw - 0.5) > 0.1;
      kpis.append(kpi("Positional bias P(A)", fmt(pa, 3), isNum(R.tau) && R.tau !== 0.5 ? `${fmt(raw, 3)} before debiasing (τ = ${fmt(R.tau, 3)}); 0.5 is unbiased` : "first position's win rate; 0.5 is unbiased", biased));
      kpis.append(kpi("Order consistency", pct(R.consistency), R.consistency ? `${R.consistency[0]} of ${R.consistency[1]} pairs agree in both orders` : ""));
      if (R.accuracy) kpis.append(kpi("Pairwise accuracy", pct(R.accuracy), `${R.accuracy[0]} of ${R.accuracy[1]} comparisons as the humans`));
    }
    const fmtCheck = R.diagnostics && R.diagnostics.checks.find((c) => c.name === "format");
    if (fmtCheck) kpis.append(kpi("Kept to the format", fmt(fmtCheck.value, 3), `share of feedbacks with the result marker once, then ${R.kind === "pairwise" ? (R.contexts.some((c) => c.p_tie) ? "A, B or a tie" : "A or B") : "a score"} (${fmtCheck.count} feedbacks)`, fmtCheck.status === "warn"));
    const C = R.correlation;
    if (C) {
      const ci = (c) => (C.no_interval ? C.no_interval : c.ci ? `95% CI [${fmt(c.ci[0], 3)}, ${fmt(c.ci[1], 3)}]` : "no interval");
      kpis.append(kpi("Spearman ρ", fmt(C.spearman.value, 3), ci(C.spearman)));
      kpis.append(kpi("Kendall τ", fmt(C.kendall.value, 3), ci(C.kendall)));
      kpis.append(kpi("Pearson r", fmt(C.pearson.value, 3), ci(C.pearson)));
    }
    page.push(h("div", { class: "grid top" },
      h("section", { class: "card" }, h("h2", { text: "The run" }), facts),
      h("section", { class: "card" }, h("h2", { text: "Key numbers" }), kpis,
        C ? h("p", { class: "caption", text: `Agreement with the human scores "${C.key}": correlation within each context, averaged over ${C.groups} context(s)${C.groups_skipped ? ` (${C.groups_skipped} skipped: equal human scores)` : ""}${C.no_interval ? "." : `; intervals from ${C.resamples} bootstrap resamples of the contexts.`}` }) : null)));
    if (D.jury) page.push(juryCard());
    const charts = h("div", { class: "grid" });
    page.push(charts);
    page.push(contextsTable());
    main.replaceChildren(...page);
    // Charts are drawn once every card is placed, at their card's width.
    const fills = [];
    const card = (title, explain, fill) => { const c = h("section", { class: "card" }, h("h3", { text: title }), explain ? h("p", { class: "explain", text: explain }) : null); charts.append(c); fills.push(() => fill(c)); };
    const W = (c) => Math.min(widthOf(c, 360) - 36, 640);
    if (R.kind === "pairwise") {
      const ps = [];
      for (const c of R.contexts) if (c.matrix) for (const v of c.matrix) if (v >= 0) ps.push(v / 1e6);
      card("P(A better than B), every comparison", "How sure the judge is, and which way it leans: mass above the threshold means the first candidate was preferred.",
        (c1) => c1.append(histogram(ps, { lo: 0, hi: 1, bins: 40, xlabel: "P(A better than B)", width: W(c1), marks: [{ x: 0.5, label: "0.5", color: "#6b7688", dash: true }].concat(isNum(R.tau) && R.tau !== 0.5 ? [{ x: R.tau, label: `τ = ${fmt(R.tau, 3)}`, color: "#b2182b" }] : []) })));
      if (n > 1) {
        card("Positional bias by context", "P(A): the share of a context's comparisons won by the candidate shown first. 0.5 is unbiased.",
          (c2) => c2.append(histogram(R.contexts.map((c) => frac(c.first_position)), { lo: 0, hi: 1, bins: 20, xlabel: "P(A) in a context", width: W(c2), marks: [{ x: 0.5, label: "unbiased", color: "#6b7688", dash: true }, { x: frac(R.first_position), label: "run", color: "#b2182b" }] })));
        card("Order consistency by context", "The share of a context's pairs whose two orders name the same winner.",
          (c3) => c3.append(histogram(R.contexts.map((c) => frac(c.consistency)), { lo: 0, hi: 1, bins: 20, xlabel: "consistency in a context", width: W(c3), color: "#3d8b6d", marks: [{ x: frac(R.consistency), label: "run", color: "#b2182b" }] })));
      }
      const pairs = [];
      R.contexts.forEach((c, k) => { for (const [i, j, a, b] of pairsOf(c, D.contexts[k].candidates.length)) pairs.push({ x: a, y: b, k, i, j }); });
      if (pairs.length) {
        const shown = pairs.length > 60000 ? pairs.filter((_, i) => i % Math.ceil(pairs.length / 60000) === 0) : pairs;
        shown.forEach((p) => { p.label = () => { const ctx = D.contexts[p.k]; return [`${ctx.id}: ${ctx.candidates[p.i].id} vs ${ctx.candidates[p.j].id}`, `${ctx.candidates[p.i].id} first: ${fmt(p.x)}`, `${ctx.candidates[p.j].id} first: ${fmt(p.y)}`, "click: open the context"]; }; });
        card("Both orders of every pair", "Each dot is a pair compared in both orders. Consistent, unbiased judgements lie on the dashed line; the red corner holds pairs where whichever candidate came first won.", (c4) => {
          c4.append(orderScatter(shown, W(c4), (p) => go({ view: "context", c: p.k })));
          if (shown.length < pairs.length) c4.append(h("p", { class: "caption", text: `${shown.length} of ${pairs.length} pairs shown.` }));
        });
      }
    } else {
      const scores = R.contexts.flatMap((c) => c.scores);
      const lo = Math.min(...scores), hi = Math.max(...scores);
      card("Scores", `${R.score}, every candidate.`, (c1) => c1.append(histogram(scores, { lo: lo === hi ? lo - 1 : lo, hi: lo === hi ? hi + 1 : hi, bins: 30, xlabel: R.score, width: W(c1) })));
    }
    if (R.human_key) {
      const pts = [];
      R.contexts.forEach((c, k) => {
        if (!c.human) return;
        c.scores.forEach((sc, i) => { if (isNum(c.human[i])) pts.push({ x: c.human[i], y: sc, k, i }); });
      });
      if (pts.length) {
        const hs = pts.map((p) => p.x), span = (Math.max(...hs) - Math.min(...hs)) || 1;
        const discrete = new Set(hs).size <= 12;
        pts.forEach((p) => { p.jx = discrete ? jitter(p.k, p.i) * span * 0.04 : 0; p.label = () => { const ctx = D.contexts[p.k]; return [`${ctx.id} / ${ctx.candidates[p.i].id}`, `${R.score}: ${fmt(p.y, 3)}`, `human: ${fmt(p.x, 2)}`, "click: open the context"]; }; });
        card(`Predicted against human (${R.human_key})`, "Every candidate with a human score. Summary-level correlations compare candidates within a context, so read this pooled cloud as an overview.", (c5) => {
          c5.append(scatter(pts, { width: W(c5), height: 300, xlabel: `human ${R.human_key}`, ylabel: R.score, onclick: (p) => go({ view: "context", c: p.k }) }));
          if (C) c5.append(h("p", { class: "caption", text: `Summary level: ρ ${fmt(C.spearman.value)}, τ ${fmt(C.kendall.value)}, r ${fmt(C.pearson.value)} (intervals above).` }));
        });
      }
    }
    fills.forEach((f) => f());
  }

  // A jury's judges, weights and agreement matrices.
  function juryCard() {
    const J = D.jury, names = J.judges.map((j) => j.name);
    const matrix = (title, rows, explain) => h("div", null, h("h3", { text: title }), h("p", { class: "explain", text: explain }),
      h("div", { class: "table-wrap" }, h("table", { class: "agree" },
        h("thead", null, h("tr", null, h("th", null), names.map((n) => h("th", { class: "num", text: n })))),
        h("tbody", null, rows.map((row, a) => h("tr", null, h("th", { text: names[a] }),
          row.map((v, b) => h("td", { class: "num" + (a === b ? " self" : ""), text: v === null ? "–" : fmt(v, 3) }))))))));
    const weights = h("table", { class: "agree" }, h("thead", null, h("tr", null, h("th", { text: "judge" }), h("th", { class: "num", text: "weight" }), h("th", { text: "its own run" }))),
      h("tbody", null, J.judges.map((j) => {
        const k = D.runs.findIndex((r) => r.name === j.name);
        return h("tr", null, h("td", { class: "id", text: j.name }), h("td", { class: "num", text: fmt(j.weight, 3) }),
          h("td", null, k >= 0 ? h("a", { href: "#", text: "open", onclick: (e) => { e.preventDefault(); go({ view: "summary", run: k }); } }) : "–"));
      })));
    const card = h("section", { class: "card" }, h("h2", { text: `The jury: ${names.length} judges` }),
      h("p", { class: "explain", text: "Each judge judged every candidate on its own; the jury's ranking combines them. Pick a judge under \"Judgement\" (or open it here) to see its own run and diagnostics." }),
      h("div", { class: "table-wrap" }, weights),
      h("div", { class: "grid two" },
        matrix("Agreement (Spearman)", J.agreement.spearman, "Spearman's correlation between two judges' scores within each context, averaged over the contexts. –: undefined."),
        J.agreement.kappa ? matrix("Agreement of decisions (Cohen's kappa)", J.agreement.kappa, "Cohen's kappa of the two judges' decisions (each at its own threshold) on the comparisons both made. –: undefined (one decision throughout).") : null));
    return card;
  }

  function contextsTable() {
    const R = run();
    const wrap = h("section", { class: "card" }, h("h2", { text: "Contexts" }));
    const rows = D.contexts.map((ctx, k) => {
      const st = contextStats(k);
      return { k, id: ctx.id, n: ctx.candidates.length, pa: frac(st.r.first_position), cons: frac(st.r.consistency), acc: frac(st.r.accuracy), rho: st.r.spearman, best: st.best ? st.best.id : "" };
    });
    const cols = [["k", "#", true], ["id", "context", false], ["n", "candidates", true]];
    if (R.kind === "pairwise") cols.push(["pa", "P(A)", true], ["cons", "consistency", true]);
    if (R.contexts.some((c) => c.accuracy)) cols.push(["acc", "accuracy", true]);
    if (R.human_key) cols.push(["rho", "Spearman ρ", true]);
    cols.push(["best", "ranked first", false]);
    const filter = h("input", { type: "search", placeholder: "filter by context or candidate id", "aria-label": "filter contexts", value: state.filter });
    const body = h("tbody");
    const head = h("tr");
    const more = h("button", { text: "Show more" });
    const count = h("span", { class: "muted" });
    const table = h("table", null, h("thead", null, head), body);
    function draw() {
      const q = state.filter.trim().toLowerCase();
      let list = rows.filter((r) => !q || r.id.toLowerCase().includes(q) || D.contexts[r.k].candidates.some((c) => c.id.toLowerCase().includes(q)));
      if (state.sort) {
        const [key, dir] = state.sort;
        list = list.slice().sort((a, b) => {
          const x = a[key], y = b[key];
          if (x === y) return a.k - b.k;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * dir;
        });
      }
      head.replaceChildren(...cols.map(([key, label, num]) => h("th", {
        class: "sortable" + (num ? " num" : "") + (key === "k" ? " hide-narrow" : ""),
        onclick: () => { state.sort = state.sort && state.sort[0] === key ? [key, -state.sort[1]] : [key, num ? -1 : 1]; if (key === "k" && state.sort[1] === -1 && !state.sort.flipped) state.sort = [key, 1]; draw(); },
      }, label, state.sort && state.sort[0] === key ? h("span", { class: "arrow", text: state.sort[1] > 0 ? " ▲" : " ▼" }) : null)));
      const shown = list.slice(0, state.page * PAGE);
      body.replaceChildren(...shown.map((r) => h("tr", { class: "row", onclick: () => go({ view: "context", c: r.k }) }, cols.map(([key, , num]) => {
        const v = r[key];
        const text = key === "k" ? String(v + 1) : num && key !== "n" ? fmt(v, 3) : String(v);
        return h("td", { class: (num ? "num" : key === "id" || key === "best" ? "id nowrap" : "") + (key === "k" ? " hide-narrow" : ""), text });
      }))));
      count.textContent = `${shown.length} of ${list.length} shown` + (list.length < rows.length ? ` (${rows.length} in all)` : "");
      more.style.display = shown.length < list.length ? "" : "none";
    }
    filter.addEventListener("input", () => { state.filter = filter.value; state.page = 1; draw(); });
    more.addEventListener("click", () => { state.page++; draw(); });
    wrap.append(h("div", { class: "toolbar" }, filter, h("span", { class: "grow" }), count), h("div", { class: "table-wrap" }, table), more);
    draw();
    return wrap;
  }

  // The comparison matrix of one context, rows and columns in rank order.
  function heatmap(k, width, onpick, centre) {
    const r = run().contexts[k], ctx = D.contexts[k], n = ctx.candidates.length;
    const order = contextStats(k).order;
    const probe = canvas(1, 1, "").ctx;
    const longest = Math.max(...ctx.candidates.map((c, i) => probe.measureText(`${r.ranks[i]}. ${c.id}`).width));
    let labelW = Math.min(200, longest + 16);
    let top = Math.min(180, longest * Math.sin(Math.PI / 3) + 18);
    // Column labels lean right at 60 degrees: room for the last one past the matrix.
    let lean = (top - 10) / Math.tan(Math.PI / 3) + 10;
    let cell = Math.max(8, Math.min(56, Math.floor((width - labelW - lean) / n)));
    // Too small for names (a narrow screen, many candidates): every k-th rank only.
    const compact = cell < 12;
    if (compact) {
      labelW = 30; top = 22; lean = 8;
      cell = Math.max(6, Math.min(56, Math.floor((width - labelW - lean) / n)));
    }
    const every = compact ? Math.ceil(14 / cell) : 1;
    const size = { w: Math.ceil(labelW + cell * n + lean), h: top + cell * n + 8 };
    const { c, ctx: g } = canvas(size.w, size.h, `comparison matrix of context ${ctx.id}`);
    c.classList.add("matrix");
    c.dataset.left = labelW; c.dataset.top = top; c.dataset.cell = cell; c.dataset.n = n;
    const rankText = (i) => (r.ranks[i] % 1 ? fmt(r.ranks[i], 1) : String(r.ranks[i]));
    const name = (i) => `${rankText(i)}. ${ctx.candidates[i].id}`;
    g.fillStyle = "#1d2330";
    if (compact) {
      g.font = "10px " + getComputedStyle(document.body).fontFamily;
      g.textAlign = "right"; g.textBaseline = "middle";
      order.forEach((i, row) => { if (row % every === 0) g.fillText(rankText(i), labelW - 4, top + row * cell + cell / 2); });
      g.textAlign = "center"; g.textBaseline = "bottom";
      order.forEach((j, col) => { if (col % every === 0) g.fillText(rankText(j), labelW + col * cell + cell / 2, top - 4); });
    } else {
      g.textAlign = "right"; g.textBaseline = "middle";
      order.forEach((i, row) => g.fillText(cut(g, name(i), labelW - 10), labelW - 6, top + row * cell + cell / 2));
      order.forEach((j, col) => {
        g.save();
        g.translate(labelW + col * cell + cell / 2 + 4, top - 6);
        g.rotate(-Math.PI / 3);
        g.textAlign = "left";
        g.fillText(cut(g, name(j), (top - 10) / Math.sin(Math.PI / 3)), 0, 0);
        g.restore();
      });
    }
    const showNumbers = cell >= 34;
    order.forEach((i, row) => order.forEach((j, col) => {
      const x = labelW + col * cell, y = top + row * cell;
      const v = r.matrix[i * n + j];
      if (i === j) { g.fillStyle = "#eef0f4"; g.fillRect(x, y, cell, cell); return; }
      if (v < 0) {
        g.fillStyle = "#fafbfc"; g.fillRect(x, y, cell, cell);
        g.strokeStyle = "#e3e7ee"; g.beginPath(); g.moveTo(x + 2, y + cell - 2); g.lineTo(x + cell - 2, y + 2); g.stroke();
        return;
      }
      g.fillStyle = pColor(v / 1e6, centre); g.fillRect(x, y, cell, cell);
      if (showNumbers) {
        g.fillStyle = Math.abs(v / 1e6 - (centre === undefined ? 0.5 : centre)) > 0.3 ? "#fff" : "#1d2330";
        g.textAlign = "center"; g.font = "11px " + getComputedStyle(document.body).fontFamily;
        g.fillText(fmt(v / 1e6, 2), x + cell / 2, y + cell / 2);
      }
    }));
    g.strokeStyle = "#ffffff"; g.lineWidth = cell >= 12 ? 1 : 0;
    if (cell >= 12) for (let t = 0; t <= n; t++) {
      g.beginPath(); g.moveTo(labelW, top + t * cell); g.lineTo(labelW + n * cell, top + t * cell); g.stroke();
      g.beginPath(); g.moveTo(labelW + t * cell, top); g.lineTo(labelW + t * cell, top + n * cell); g.stroke();
    }
    const at = (e) => {
      const rect = c.getBoundingClientRect();
      const x = ((e.clientX - rect.left) / rect.width) * size.w - labelW, y = ((e.clientY - rect.top) / rect.height) * size.h - top;
      const col = Math.floor(x / cell), row = Math.floor(y / cell);
      return row >= 0 && col >= 0 && row < n && col < n ? [order[row], order[col]] : null;
    };
    c.addEventListener("mousemove", (e) => {
      const p = at(e);
      if (!p || p[0] === p[1]) { hideTip(); c.style.cursor = ""; return; }
      const [i, j] = p, a = r.matrix[i * n + j], b = r.matrix[j * n + i];
      c.style.cursor = "pointer";
      const ta = tieAt(r, n, i, j), tb = tieAt(r, n, j, i);
      showTip(e, [`A = ${ctx.candidates[i].id}, B = ${ctx.candidates[j].id}`,
        `P(A better) = ${a >= 0 ? fmt(a / 1e6) : "not compared"}${ta >= 0 ? `, P(tie) = ${fmt(ta / 1e6)}` : ""}`,
        `reversed (${ctx.candidates[j].id} first): ${b >= 0 ? fmt(b / 1e6) : "not compared"}${tb >= 0 ? `, P(tie) = ${fmt(tb / 1e6)}` : ""}`, "click: read both texts"]);
    });
    c.addEventListener("mouseleave", hideTip);
    c.addEventListener("click", (e) => { const p = at(e); if (p && p[0] !== p[1]) onpick(p[0], p[1]); });
    return c;
  }

  function pairPanel(k, i, j) {
    const r = run().contexts[k], ctx = D.contexts[k], n = ctx.candidates.length;
    const a = r.matrix ? r.matrix[i * n + j] : -1, b = r.matrix ? r.matrix[j * n + i] : -1;
    const ta = tieAt(r, n, i, j), tb = tieAt(r, n, j, i);
    const tie = (t) => (t >= 0 ? `, P(tie) = ${fmt(t / 1e6)}` : "");
    const side = (x, label) => h("div", null,
      h("h4", null, `${label}: `, h("code", { text: ctx.candidates[x].id }), ` — rank ${r.ranks[x]}, ${run().score} ${fmt(r.scores[x])}${r.human && isNum(r.human[x]) ? `, human ${fmt(r.human[x], 2)}` : ""}`),
      h("pre", { class: "text", text: ctx.candidates[x].text }));
    const said = (x, y) => {
      const f = (r.pair_feedback || []).find((p) => p.first === x && p.second === y);
      return f ? h("div", { class: "pair-feedback" },
        h("h4", null, "The judge's feedback with ", h("code", { text: ctx.candidates[x].id }), " shown first (A) ", badge(f.format, pairFormats(r))),
        h("pre", { class: "text feedback", text: f.feedback.trim() ? f.feedback : "(no feedback written before the result marker)" })) : null;
    };
    return h("div", { class: "pair" },
      h("div", { class: "probs" }, `${ctx.candidates[i].id} shown first (A): P(A better) = ${a >= 0 ? fmt(a / 1e6) : "not compared"}${tie(ta)}. `,
        `${ctx.candidates[j].id} shown first: P(A better) = ${b >= 0 ? fmt(b / 1e6) : "not compared"}${tie(tb)}.`,
        a >= 0 && b >= 0 ? ((a > 5e5) === (b > 5e5) ? ` The two orders disagree: the ${a > 5e5 ? "first" : "second"} position won both times.` : " The two orders agree.") : ""),
      said(i, j), said(j, i),
      side(i, "A"), side(j, "B"));
  }

  // Relative rubric grading: the judge's feedback on every comparison, in design order,
  // each row opening to the whole feedback.
  function pairFeedbackCard(r, ctx) {
    const body = h("tbody"), tied = !!r.p_tie;
    r.pair_feedback.forEach((f) => {
      const n = ctx.candidates.length, p = r.matrix ? r.matrix[f.first * n + f.second] : -1;
      const t = tieAt(r, n, f.first, f.second);
      const detail = h("tr", { class: "detail", style: "display:none" }, h("td", { colspan: tied ? 6 : 5 },
        h("pre", { class: "text feedback", text: f.feedback.trim() ? f.feedback : "(no feedback written before the result marker)" })));
      const row = h("tr", { class: "row", onclick: () => { detail.style.display = detail.style.display === "none" ? "" : "none"; } },
        h("td", { class: "id", text: ctx.candidates[f.first].id }),
        h("td", { class: "id", text: ctx.candidates[f.second].id }),
        h("td", { class: "num", text: p >= 0 ? fmt(p / 1e6) : "–" }),
        tied ? h("td", { class: "num", text: t >= 0 ? fmt(t / 1e6) : "–" }) : null,
        h("td", null, badge(f.format, pairFormats(r))),
        h("td", { class: "fb hide-narrow" }, h("span", { class: "fb-text", text: f.feedback.replace(/\s+/g, " ").trim() || "–" })));
      body.append(row, detail);
    });
    return h("section", { class: "card" }, h("h2", { text: "The judge's feedback on each comparison" }),
      h("p", { class: "explain", text: tied
        ? "Relative rubric grading: the judge wrote a feedback comparing the two candidates, then chose A, B or a tie after its result marker. P(A better) is over A and B (the tie left out), P(tie) over all three. Click a row to read the whole feedback."
        : "Relative rubric grading: the judge wrote a feedback comparing the two candidates, then chose A or B after its result marker. Click a row to read the whole feedback." }),
      h("div", { class: "table-wrap" }, h("table", null, h("thead", null, h("tr", null,
        h("th", { text: "A (shown first)" }), h("th", { text: "B" }), h("th", { class: "num", text: "P(A better)" }),
        tied ? h("th", { class: "num", text: "P(tie)" }) : null,
        h("th", { text: "format" }), h("th", { class: "hide-narrow", text: "feedback" }))), body)));
  }

  function contextPage() {
    const R = run(), k = state.ctx, { r, ctx, order } = contextStats(k), n = ctx.candidates.length;
    const page = [];
    const pick = h("select", { "aria-label": "context", onchange: (e) => go({ view: "context", c: parseInt(e.target.value, 10) }) },
      D.contexts.map((c, i) => h("option", { value: i, selected: i === k }, `${i + 1}. ${c.id}`)));
    page.push(h("div", { class: "toolbar" },
      h("button", { text: "← previous", disabled: k === 0, onclick: () => go({ view: "context", c: k - 1 }) }),
      pick,
      h("button", { text: "next →", disabled: k + 1 >= D.contexts.length, onclick: () => go({ view: "context", c: k + 1 }) }),
      h("span", { class: "grow" }), h("span", { class: "muted", text: `context ${k + 1} of ${D.contexts.length}` })));
    const chips = h("div", { class: "chips" });
    const chip = (label, value) => chips.append(h("span", { class: "chip" }, label + " ", h("b", { text: value })));
    chip("candidates", String(n));
    if (r.first_position) chip("P(A)", pct(r.first_position));
    if (r.consistency) chip("consistency", pct(r.consistency));
    if (r.accuracy) chip("accuracy", pct(r.accuracy));
    if (R.human_key) { chip("Spearman ρ", fmt(r.spearman)); chip("Kendall τ", fmt(r.kendall)); }
    const text = h("pre", { class: "text clamp", text: ctx.text || "(no context text)" });
    const toggle = h("button", { text: "Show the whole context", onclick: () => { const c = text.classList.toggle("clamp"); toggle.textContent = c ? "Show the whole context" : "Show less"; } });
    page.push(h("section", { class: "card" }, h("h2", null, "Context ", h("code", { text: ctx.id })), chips,
      r.note ? h("p", { class: "caption", text: r.note }) : null, text, h("div", { style: "margin-top:8px" }, toggle)));
    // Ranking.
    const maxScore = Math.max(...r.scores), minScore = Math.min(0, ...r.scores);
    const body = h("tbody");
    const judges = R.judges && r.judge_scores ? R.judges : [];
    const feedback = r.feedback || null, formats = r.formats || null;
    const cols = 4 + (r.human ? 1 : 0) + (r.distributions ? 1 : 0) + judges.length + (feedback ? 1 : 0);
    order.forEach((i) => {
      const cand = ctx.candidates[i];
      const share = maxScore > minScore ? (r.scores[i] - minScore) / (maxScore - minScore) : 0;
      const said = feedback ? feedback[i] : null;
      const detail = h("tr", { class: "detail", style: "display:none" }, h("td", { colspan: cols },
        feedback ? h("h4", { text: "Candidate" }) : null,
        h("pre", { class: "text", text: cand.text }),
        feedback ? [h("h4", null, "The judge's feedback ", badge(formats && formats[i])),
          h("pre", { class: "text feedback", text: said && said.trim() ? said : "(no feedback written before the result marker)" })] : null));
      const row = h("tr", { class: "row" + (r.ranks[i] === 1 ? " rank1" : ""), onclick: () => { detail.style.display = detail.style.display === "none" ? "" : "none"; } },
        h("td", { class: "num", text: r.ranks[i] % 1 ? fmt(r.ranks[i], 1) : String(r.ranks[i]) }),
        h("td", { class: "id" }, cand.id, cand.system && cand.system !== cand.id ? h("div", { class: "muted", text: cand.system }) : null),
        h("td", { class: "num" }, h("span", { class: "bar hide-narrow", style: `width:${Math.round(share * 60)}px` }), fmt(r.scores[i])),
        judges.map((_, j) => h("td", { class: "num", text: fmt(r.judge_scores[j][i]) })),
        r.human ? h("td", { class: "num", text: fmt(r.human[i], 2) }) : null,
        r.distributions ? h("td", null, distribution(r.distributions[i], R.scale)) : null,
        feedback ? h("td", { class: "fb hide-narrow" }, badge(formats && formats[i]), h("span", { class: "fb-text", text: (said || "").replace(/\s+/g, " ").trim() || "–" })) : null,
        h("td", { class: "preview", text: cand.text.replace(/\s+/g, " ").trim() }));
      body.append(row, detail);
    });
    const showAll = h("button", { text: "Show every text", onclick: () => { const rows = body.querySelectorAll("tr.detail"); const open = showAll.textContent.startsWith("Show"); rows.forEach((d) => { d.style.display = open ? "" : "none"; }); showAll.textContent = open ? "Hide the texts" : "Show every text"; } });
    const explain = `Best first, by ${R.score}.` + (judges.length ? " Each judge's own score beside the jury's." : "") +
      (feedback ? " Click a row to read the candidate and the judge's whole feedback." : " Click a row to read the candidate.");
    const ranking = h("section", { class: "card" }, h("h2", { text: "Ranking" }),
      h("p", { class: "explain", text: explain }),
      h("div", { class: "table-wrap" }, h("table", null, h("thead", null, h("tr", null,
        h("th", { class: "num", text: "rank" }), h("th", { text: "candidate" }), h("th", { class: "num", text: R.score }),
        judges.map((name) => h("th", { class: "num judge", title: name, text: name })),
        r.human ? h("th", { class: "num", text: `human ${R.human_key}` }) : null,
        r.distributions ? h("th", { text: "P(score)" }) : null,
        feedback ? h("th", { class: "hide-narrow", text: "feedback" }) : null, h("th", { text: "text" }))), body)), showAll);
    page.push(ranking);
    if (r.pair_feedback) page.push(pairFeedbackCard(r, ctx));
    const figures = h("div", { class: "grid" });
    page.push(figures);
    main.replaceChildren(...page);
    if (r.matrix) {
      const card = h("section", { class: "card", style: "grid-column: 1 / -1" }, h("h2", { text: "Who beat whom" }),
        h("p", { class: "explain", text: "Cell (row, column): the probability that the row's candidate, shown first as A, is better than the column's candidate shown as B. Rows and columns in rank order. Each pair appears twice, once per order: without positional bias a cell and its mirror across the diagonal add up to about 1; a matrix red on both sides of the diagonal means the first position wins. Hover for the numbers, click a cell to read both texts." }),
        r.p_tie ? h("p", { class: "explain", text: "The judge may call a tie: a cell is P(A)/(P(A)+P(B)), the tie left out; hover for P(tie)." }) : null);
      figures.append(card);
      const pairSlot = h("div");
      const scroll = h("div", { class: "scroll-x" });
      card.append(scroll);
      const pick = (i, j) => { pairSlot.replaceChildren(pairPanel(k, i, j)); pairSlot.scrollIntoView({ block: "nearest", behavior: "smooth" }); };
      const debiased = isNum(R.tau) && Math.abs(R.tau - 0.5) > 1e-9;
      const middle = h("span", { text: "0.5" });
      const draw = (centre) => {
        scroll.replaceChildren(heatmap(k, Math.max(widthOf(card, 600) - 40, 280), pick, centre));
        middle.textContent = `middle: ${fmt(centre, 3)}`;
      };
      card.append(h("div", { class: "legend" }, "B better", h("span", { class: "ramp", style: `background:${ramp()}` }), "A better", middle, h("span", { text: "· grey: same candidate; crossed: not compared" })));
      if (debiased) {
        const toggle = h("button", { text: `Centre the colours at the run's threshold τ = ${fmt(R.tau, 3)}` });
        let atTau = false;
        toggle.addEventListener("click", () => { atTau = !atTau; draw(atTau ? R.tau : 0.5); toggle.textContent = atTau ? "Centre the colours at 0.5" : `Centre the colours at the run's threshold τ = ${fmt(R.tau, 3)}`; });
        card.append(h("p", { class: "caption" }, "The run decides at τ, so a pair is won by A when its cell is above τ. ", toggle));
      }
      card.append(pairSlot);
      draw(0.5);
      const pairs = pairsOf(r, n).map(([i, j, a, b]) => ({ x: a, y: b, i, j, label: () => [`${ctx.candidates[i].id} vs ${ctx.candidates[j].id}`, `${ctx.candidates[i].id} first: ${fmt(a)}`, `${ctx.candidates[j].id} first: ${fmt(b)}`, "click: read both texts"] }));
      if (pairs.length) {
        const c2 = h("section", { class: "card" }, h("h3", { text: "Both orders of each pair" }), h("p", { class: "explain", text: "One dot per pair compared in both orders; consistent judgements lie near the dashed line." }));
        figures.append(c2);
        c2.append(orderScatter(pairs, Math.min(widthOf(c2, 360) - 36, 520), (p) => pick(p.i, p.j)));
      }
    }
    if (r.human && R.human_key) {
      const pts = [];
      r.scores.forEach((sc, i) => { if (isNum(r.human[i])) pts.push({ x: r.human[i], y: sc, i, label: () => [ctx.candidates[i].id, `${R.score}: ${fmt(sc)}`, `human: ${fmt(r.human[i], 2)}`] }); });
      if (pts.length > 1) {
        const c3 = h("section", { class: "card" }, h("h3", { text: `Predicted against human (${R.human_key})` }), h("p", { class: "explain", text: `Spearman ρ ${fmt(r.spearman)}, Kendall τ ${fmt(r.kendall)} within this context.` }));
        figures.append(c3);
        c3.append(scatter(pts, { width: Math.min(widthOf(c3, 360) - 36, 520), height: 280, xlabel: `human ${R.human_key}`, ylabel: R.score }));
      }
    }
  }

  function distribution(p, scale) {
    const top = Math.max(...p, 1e-9);
    const d = h("span", { class: "dist", title: (scale || []).map((v, i) => `${v}: ${fmt(p[i], 3)}`).join(", ") });
    p.forEach((v) => d.append(h("span", { style: `height:${Math.max(1, Math.round((v / top) * 22))}px` })));
    return d;
  }

  function tables() {
    document.getElementById("sections").style.display = "";
    const page = D.notes.map((note) => h("div", { class: "note", text: note }));
    if (!D.runs.length && D.facts.length) {
      page.push(h("section", { class: "card" }, h("h2", { text: "The run" }),
        h("dl", { class: "facts" }, D.facts.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })]))));
    }
    main.replaceChildren(...page);
  }

  function render() {
    readHash();
    header();
    hideTip();
    const sections = document.getElementById("sections");
    if (sections) sections.style.display = "none";
    if (state.view === "tables") tables();
    else if (state.view === "context" && D.contexts.length) contextPage();
    else summary();
    window.scrollTo(0, 0);
  }
  window.addEventListener("hashchange", render);
  let resizing = 0, lastWidth = window.innerWidth;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => { if (Math.abs(window.innerWidth - lastWidth) > 40) { lastWidth = window.innerWidth; const y = window.scrollY; render(); window.scrollTo(0, y); } }, 200);
  });
  render();
})();
