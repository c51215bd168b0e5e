// Dashboard charts with the vendored uPlot; the data is in the page (no second request).
"use strict";
(() => {
  const data = JSON.parse(document.getElementById("dashboard-data").textContent);
  const css = getComputedStyle(document.documentElement);
  const good = css.getPropertyValue("--good").trim() || "#2e7d32";
  const bad = css.getPropertyValue("--bad").trim() || "#c62828";
  const accent = css.getPropertyValue("--accent").trim() || "#1565c0";

  function width(node) { return Math.max(240, node.clientWidth || node.parentElement.clientWidth); }

  function draw(node, opts, rows) {
    if (!node) return;
    const plot = new uPlot({ width: width(node), height: node.classList.contains("small") ? 140 : 200, ...opts }, rows, node);
    new ResizeObserver(() => plot.setSize({ width: width(node), height: plot.height })).observe(node);
  }

  const days = data.per_day;
  if (days.day.length) {
    const xs = days.day.map((d) => Date.parse(d + "T12:00:00Z") / 1000);
    const bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.6, 24] }) : undefined;
    draw(document.getElementById("chart-days"), {
      series: [{}, { label: "good", stroke: good, fill: good + "55", paths: bars },
               { label: "bad", stroke: bad, fill: bad + "55", paths: bars }],
      axes: [{}, { label: "ratings" }],
    }, [xs, days.good, days.bad]);
  }

  const runs = data.runs;
  if (runs.length) {
    const xs = runs.map((_, i) => i + 1);
    const one = (id, key, label) => draw(document.getElementById(id), {
      scales: { x: { time: false } },
      series: [{ label: "run" }, { label, stroke: accent, points: { show: true, size: 6 }, spanGaps: true }],
      axes: [{ label: "run" }, { size: 60 }],
      legend: { show: false },
    }, [xs, runs.map((r) => (typeof key === "function" ? key(r) : r[key]))]);
    one("chart-auroc", "auroc", "AUROC");
    one("chart-loss", "loss", "loss");
    one("chart-kl", "kl", "KL");
    one("chart-masked", "masked", "masked");
    one("chart-duration", (r) => (r.duration_s == null ? null : r.duration_s / 60), "minutes");
  }
})();
