// Dashboard charts with the vendored uPlot, and a poll that keeps an open window current.
//
// The first paint needs no second request: the data is in the page (#dashboard-data). While
// the page is visible, /api/dashboard is asked every POLL_MS; when its answer differs from
// what the page shows, the page's own HTML is fetched and <main> swapped, so the template
// stays the one place that knows how a number or a run is shown.
"use strict";
(() => {
  const POLL_MS = 12000;
  const DAY = 86400;
  const css = getComputedStyle(document.documentElement);
  const colour = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  const good = colour("--good", "#2e7d32");
  const bad = colour("--bad", "#c62828");
  const accent = colour("--accent", "#1565c0");
  // the days are UTC days ("2025-03-01"): label them in UTC too, or a day west of Greenwich
  // would carry the previous day's name
  const dayName = new Intl.DateTimeFormat(navigator.language, { month: "short", day: "numeric", timeZone: "UTC" });
  let plots = [];

  function width(node) { return Math.max(240, node.clientWidth || node.parentElement.clientWidth); }

  /** An empty series draws bare axes that read as "zero"; a sentence says what is missing. */
  function empty(node, message) {
    node.classList.add("empty");
    node.replaceChildren(Object.assign(document.createElement("p"), { className: "muted", textContent: message }));
  }

  function draw(node, opts, rows, message) {
    if (!node) return;
    if (!rows.slice(1).some((series) => series.some((v) => v != null))) {
      empty(node, message);
      return;
    }
    const plot = new uPlot({ width: width(node), height: node.classList.contains("small") ? 150 : 200, ...opts }, rows, node);
    const observer = new ResizeObserver(() => plot.setSize({ width: width(node), height: plot.height }));
    observer.observe(node);
    node.uplot = plot; // the chart behind its node, for tests and the developer console
    plots.push({ plot, observer });
  }

  /** 0 to a little above ``max``: bars and durations only read right measured from zero. */
  function fromZero(u, min, max) { return [0, uPlot.rangeNum(0, Math.max(max, 1), 0.1, true)[1]]; }

  function drawDays(days) {
    if (!days.day.length) return;
    // a bar per UTC day at its midnight, the x range one day wider each side than the data
    // (not than uPlot's guess: for one point it adds 86400 / 1e-3 s, running the axis ~1000 days
    // on), and the first and last bars are not cut in half
    const xs = days.day.map((d) => Date.parse(d + "T00:00:00Z") / 1000);
    const bars = (align) => uPlot.paths.bars({ size: [0.4, 18], align });
    draw(document.getElementById("chart-days"), {
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
      scales: { x: { time: true, range: (u) => [u.data[0][0] - DAY, u.data[0][u.data[0].length - 1] + DAY] },
                y: { range: fromZero } },
      // good and bad side by side, each from zero: overlapping bars hid one behind the other
      legend: { live: false }, // which colour is which; the axis gives the numbers
      series: [{ label: "day" },
               { label: "good", stroke: good, fill: good + "88", paths: bars(-1), points: { show: false } },
               { label: "bad", stroke: bad, fill: bad + "88", paths: bars(1), points: { show: false } }],
      axes: [{ space: 50, incrs: [DAY, 2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY],
               values: (u, splits) => splits.map((ts) => dayName.format(new Date(ts * 1000))) },
             { label: "ratings", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] }],
    }, [xs, days.good, days.bad], "No ratings in these days yet.");
  }

  function drawRuns(runs) {
    if (!runs.length) return;
    const xs = runs.map((_, i) => i + 1);
    const one = (id, values, label, message, y = {}) => draw(document.getElementById(id), {
      scales: { x: { time: false, range: (u) => [0.5, u.data[0].length + 0.5] }, y },
      series: [{ label: "run" }, { label, stroke: accent, points: { show: true, size: 6 }, spanGaps: false }],
      axes: [{ incrs: [1, 2, 5, 10, 20, 50] }, { size: 60, space: 20 }],
      legend: { show: false },
    }, [xs, values], message);
    const measured = (key) => runs.map((r) => r[key]);
    one("chart-auroc", measured("auroc"), "AUROC", "No run measured its AUROC yet.");
    one("chart-loss", measured("loss"), "loss", "No run reported a loss yet.");
    one("chart-kl", measured("kl"), "KL", "No run measured its KL yet.");
    one("chart-masked", measured("masked"), "masked", "No run reported masked tokens yet.");
    // only finished runs took a training's time: a failed or cancelled one would plot as a
    // run that took (almost) no time
    const minutes = runs.map((r) => (r.status === "done" && r.duration_s != null ? r.duration_s / 60 : null));
    one("chart-duration", minutes, "minutes", "No run has finished yet.", { range: fromZero });
  }

  function drawAll() {
    const data = JSON.parse(document.getElementById("dashboard-data").textContent);
    drawDays(data.per_day);
    drawRuns(data.runs);
    return data;
  }

  let shown = JSON.stringify(drawAll());
  let busy = false;
  let timer = null;

  /** Put the page's newer copy of <main> in place (the flash box stays: app.js holds it). */
  async function refresh() {
    const response = await fetch(location.pathname, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html").querySelector("main");
    if (!fresh) return;
    for (const { plot, observer } of plots) { observer.disconnect(); plot.destroy(); }
    plots = [];
    const main = document.querySelector("main");
    for (const node of [...main.children]) if (node.id !== "flash") node.remove();
    for (const node of [...fresh.children]) if (node.id !== "flash") main.append(node);
    shown = JSON.stringify(drawAll());
  }

  async function poll() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch("/api/dashboard", { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.status === 401 || response.status === 403) { clearInterval(timer); return; } // signed out
      if (response.ok && JSON.stringify(await response.json()) !== shown) await refresh();
    } catch (err) {
      // rltray stopped or is restarting: the next tick asks again
    } finally {
      busy = false;
    }
  }

  timer = setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
})();
