// Opens nlg-judge HTML reports in headless Chromium (Debian's package, through
// playwright-core), fails on any console error or page error, checks what the pages
// show, takes screenshots at two widths and times the loads.
//
//   node check_report_in_browser.mjs OUT_DIR NAME=REPORT.html [NAME=REPORT.html ...]
//
// Run by scripts/check_report_in_browser.sh, which builds the reports and installs
// playwright-core.
import { chromium } from "playwright-core";
import { statSync } from "node:fs";
import { resolve } from "node:path";

const [outDir, ...specs] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failures = 0;
const fail = (message) => { failures++; console.log(`FAIL ${message}`); };

// What a page draws over itself: a chart's y title over its tick labels, a histogram's
// marker label over its bars, a sentence that ends in a dangling separator.
function layoutProblems() {
  const problems = [];
  for (const c of document.querySelectorAll("main canvas[data-ytitle-right]")) {
    if (+c.dataset.ytitleRight > +c.dataset.yticksLeft) problems.push(`a chart's y title (to x ${c.dataset.ytitleRight}) runs over its tick labels (from x ${c.dataset.yticksLeft})`);
  }
  for (const svg of document.querySelectorAll("main svg")) {
    const bars = [...svg.querySelectorAll("rect")].map((r) => r.getBBox());
    for (const label of svg.querySelectorAll("text[font-weight='600']")) {
      const b = label.getBBox();
      const over = bars.some((r) => b.x < r.x + r.width && r.x < b.x + b.width && b.y < r.y + r.height && r.y < b.y + b.height);
      if (over) problems.push(`the marker label "${label.textContent}" is drawn over a bar`);
    }
  }
  for (const p of document.querySelectorAll("main .caption, main .explain")) {
    if (/[;,:]\s*$/.test(p.textContent)) problems.push(`a sentence ends dangling: "${p.textContent.slice(-60)}"`);
  }
  return problems;
}

for (const spec of specs) {
  const [name, file] = spec.split("=");
  const url = "file://" + resolve(file);
  const bytes = statSync(file).size;
  for (const width of [1400, 420]) {
    const context = await browser.newContext({ viewport: { width, height: 900 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    const errors = [];
    const requests = [];
    page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") errors.push(`${m.type()}: ${m.text()}`); });
    page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
    page.on("request", (r) => { if (!r.url().startsWith("file://") && !r.url().startsWith("data:")) requests.push(r.url()); });
    const started = Date.now();
    await page.goto(url, { waitUntil: "load" });
    await page.waitForSelector("#main > *");
    const loaded = Date.now() - started;
    const timing = await page.evaluate(() => {
      const n = performance.getEntriesByType("navigation")[0];
      return { domContentLoaded: Math.round(n.domContentLoadedEventEnd), load: Math.round(n.loadEventEnd) };
    });
    const summary = await page.evaluate(() => ({
      tabs: [...document.querySelectorAll("#tabs a")].map((a) => a.textContent),
      kpis: document.querySelectorAll(".kpi").length,
      rows: document.querySelectorAll("tbody tr.row").length,
      charts: document.querySelectorAll("main svg, main canvas").length,
      overflow: document.documentElement.scrollWidth - window.innerWidth,
    }));
    await page.screenshot({ path: `${outDir}/${name}-summary-${width}.png`, fullPage: true });
    for (const problem of await page.evaluate(layoutProblems)) fail(`${name} @${width}px summary: ${problem}`);
    // Each further judgement (a jury's judges) on its own page.
    const runs = await page.$$eval("select[aria-label=run] option", (o) => o.length);
    for (let k = 1; k < runs; k++) {
      await page.evaluate((k) => { location.hash = `view=summary&run=${k}`; }, k);
      await page.waitForFunction((k) => document.querySelector("select[aria-label=run]")?.value === String(k), k);
      for (const problem of await page.evaluate(layoutProblems)) fail(`${name} @${width}px judgement ${k}: ${problem}`);
      if (k === 1) await page.screenshot({ path: `${outDir}/${name}-judge${k}-${width}.png`, fullPage: true });
    }
    if (runs > 1) {
      await page.evaluate(() => { location.hash = "view=summary&run=0"; });
      await page.waitForFunction(() => document.querySelector("select[aria-label=run]")?.value === "0");
    }
    let line = `${name} @${width}px: ${(bytes / 1e6).toFixed(2)} MB, shown after ${loaded} ms (DOMContentLoaded ${timing.domContentLoaded} ms, load ${timing.load} ms); tabs ${summary.tabs.join("|")}; ${summary.kpis} key numbers, ${summary.charts} charts, ${summary.rows} context rows`;
    if (summary.overflow > 0) fail(`${name} @${width}px: the page is ${summary.overflow}px wider than the window`);
    if (summary.tabs.includes("Contexts")) {
      // Open the first context from the table, then a matrix cell's pair of texts.
      const t0 = Date.now();
      await page.click("tbody tr.row");
      await page.waitForSelector("main h2 code");
      const opened = Date.now() - t0;
      const context = await page.evaluate(() => ({
        ranking: document.querySelectorAll("tbody tr.row").length,
        canvases: document.querySelectorAll("main canvas").length,
        overflow: document.documentElement.scrollWidth - window.innerWidth,
      }));
      // A cell off the diagonal: the first row's last column (best against worst).
      const canvas = await page.$("canvas.matrix");
      const n = context.ranking;
      line += `; context page in ${opened} ms: ${context.ranking} candidates, ${context.canvases} canvases`;
      if (canvas) {
        const at = await canvas.evaluate((c) => {
          const d = c.dataset, scale = c.getBoundingClientRect().width / parseFloat(d.width);
          return { x: (+d.left + (+d.n - 0.5) * +d.cell) * scale, y: (+d.top + 0.5 * +d.cell) * scale };
        });
        await canvas.click({ position: at });
        const pair = await page.$(".pair");
        line += `, pair panel ${pair ? "shown" : "missing"}`;
        if (!pair) fail(`${name} @${width}px: clicking a matrix cell showed no pair`);
      } else {
        // No matrix (absolute scores): a row opens its candidate's text.
        await page.click("tbody tr.row");
        const shown = await page.$eval("tbody tr.detail", (d) => d.style.display !== "none");
        line += `, text on click ${shown ? "shown" : "missing"}`;
        if (!shown) fail(`${name} @${width}px: clicking a ranking row showed no text`);
      }
      if (context.overflow > 0) fail(`${name} @${width}px: the context page is ${context.overflow}px wider than the window`);
      for (const problem of await page.evaluate(layoutProblems)) fail(`${name} @${width}px context: ${problem}`);
      if (name.startsWith("relative")) {
        // Relative rubric grading: every comparison's feedback, in a card and with the
        // pair's texts; with a tie label (relative-tie) P(tie) in the card's table and
        // the pair's line, without one no P(tie) anywhere.
        const card = await page.$("text=The judge's feedback on each comparison");
        const beside = await page.$$(".pair-feedback");
        line += `, feedback card ${card ? "shown" : "missing"}, ${beside.length} feedbacks with the pair`;
        if (!card) fail(`${name} @${width}px: no card of the comparisons' feedback`);
        if (beside.length < 1) fail(`${name} @${width}px: the pair panel shows no feedback`);
        const ties = await page.evaluate(() => ({
          column: [...document.querySelectorAll("main th")].some((th) => th.textContent === "P(tie)"),
          pair: /P\(tie\) = \d/.test(document.querySelector(".pair .probs")?.textContent || ""),
          anywhere: document.querySelector("main").textContent.includes("P(tie)"),
        }));
        const tied = name === "relative-tie";
        line += tied ? `, P(tie) column ${ties.column ? "shown" : "missing"}, in the pair's line ${ties.pair ? "shown" : "missing"}` : "";
        if (tied && !(ties.column && ties.pair)) fail(`${name} @${width}px: P(tie) missing (column ${ties.column}, pair ${ties.pair})`);
        if (!tied && ties.anywhere) fail(`${name} @${width}px: a run without a tie label shows P(tie)`);
      }
      if (n < 2) fail(`${name}: the ranking has ${n} rows`);
      await page.screenshot({ path: `${outDir}/${name}-context-${width}.png`, fullPage: true });
      if (width === 1400) {
        await page.screenshot({ path: `${outDir}/${name}-context-${width}-top.png`, fullPage: true, clip: { x: 0, y: 0, width, height: 1300 } });
      }
    }
    if (summary.tabs.includes("Tables & figures")) {
      await page.click("text=Tables & figures");
      await page.screenshot({ path: `${outDir}/${name}-tables-${width}.png`, fullPage: true });
    }
    console.log(line);
    for (const e of errors) fail(`${name} @${width}px: ${e}`);
    for (const r of requests) fail(`${name} @${width}px: requested ${r}`);
    await context.close();
  }
}
await browser.close();
console.log(failures ? `${failures} failed` : "browser check: no console errors, no requests, every page drawn");
process.exit(failures ? 1 : 0);
