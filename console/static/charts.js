// Josef console charts, drawn by uPlot (vendor/uplot): every element with class "chart" and a
// data-series attribute (a JSON list of series names) becomes a time-series chart from
// /api/series, redrawn every data-refresh milliseconds (body attribute). The x axis is wall
// clock time; the y axis ticks carry data-unit ("msg/s", "B/s", "req/s", "messages");
// the legend sits below the plot (it never covers the lines) and shows each series' value at
// the cursor. Labels are set with textContent (never parsed as HTML).
"use strict";
(function () {
  const COLORS = ["#2f5fd0", "#d07a2f", "#2fa05f", "#a03fb0", "#b03040"];

  function human(v, unit) {
    if (v === null || v === undefined) return "-";
    const bytes = unit === "B/s";
    const step = bytes ? 1024 : 1000;
    const names = bytes ? ["B", "KiB", "MiB", "GiB"] : ["", "k", "M", "G"];
    let a = Math.abs(v), i = 0;
    while (a >= step && i < names.length - 1) { a /= step; v /= step; i++; }
    const num = (Math.round(v * 100) / 100).toString();
    if (bytes) return num + " " + names[i] + "/s";
    return num + names[i] + (unit ? " " + unit : "");
  }

  let clockFmt = null;
  function clock(d) {  // local wall-clock time, 24 h
    if (clockFmt === null) clockFmt = uPlot.fmtDate("{HH}:{mm}:{ss}");
    return clockFmt(d);
  }

  function short(name) {
    const parts = name.split(".");
    return parts[parts.length - 1].replace(/_/g, " ");
  }

  function toColumns(names, data) {
    const times = new Set();
    names.forEach(function (n) { (data[n] || []).forEach(function (p) { times.add(p[0]); }); });
    const xs = Array.from(times).sort(function (a, b) { return a - b; });
    const cols = [xs];
    names.forEach(function (n) {
      const m = new Map((data[n] || []).map(function (p) { return [p[0], p[1]]; }));
      cols.push(xs.map(function (t) { return m.has(t) ? m.get(t) : null; }));
    });
    return cols;
  }

  function setup(box) {
    let names;
    try { names = JSON.parse(box.getAttribute("data-series")); } catch (e) { return; }
    const unit = box.getAttribute("data-unit") || "";
    const title = document.createElement("div");
    title.className = "title";
    title.textContent = box.getAttribute("data-label") || names.join(", ");
    box.appendChild(title);
    const empty = document.createElement("div");
    empty.className = "empty";
    empty.textContent = "collecting data: a point every " +
      Math.round((parseInt(document.body.getAttribute("data-refresh"), 10) || 5000) / 1000) + " s";
    box.appendChild(empty);
    const holder = document.createElement("div");
    box.appendChild(holder);
    let plot = null;

    function width() { return Math.max(240, box.clientWidth - 16); }

    function make(cols) {
      const opts = {
        width: width(), height: 170,
        scales: {x: {time: true}, y: {range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; }}},
        axes: [
          {stroke: "#667085", grid: {stroke: "#eef1f7"}, space: 70,
           values: function (u, vals) {
             let prev = null;
             return vals.map(function (v) {  // one label per distinct second
               const text = clock(new Date(v * 1000));
               const shown = text === prev ? "" : text;
               prev = text;
               return shown;
             });
           }},
          {stroke: "#667085", grid: {stroke: "#eef1f7"},
           size: function (u, values) {  // wide enough for the longest tick label
             const longest = (values || []).reduce(function (m, v) {
               return Math.max(m, String(v).length); }, 4);
             return 16 + longest * 7;
           },
           values: function (u, vals) { return vals.map(function (v) { return human(v, unit); }); }},
        ],
        legend: {show: true, live: true},
        series: [{label: "time"}].concat(names.map(function (n, i) {
          return {label: short(n), stroke: COLORS[i % COLORS.length], width: 1.6,
                  spanGaps: true, value: function (u, v) { return human(v, unit); }};
        })),
      };
      plot = new uPlot(opts, cols, holder);
      (window.josefCharts = window.josefCharts || []).push(plot);  // for tests and debugging
    }

    function draw(data) {
      const cols = toColumns(names, data);
      const enough = cols[0].length >= 2;
      empty.hidden = enough;
      holder.hidden = !enough;
      if (!enough) return;
      if (plot === null) make(cols); else plot.setData(cols);
    }

    const query = names.map(function (n) { return "name=" + encodeURIComponent(n); }).join("&");
    function refresh() {
      fetch("/api/series?" + query).then(function (r) { return r.json(); })
        .then(draw)
        .catch(function () { /* the banner says when the console cannot reach the cluster */ });
    }
    refresh();
    setInterval(refresh, parseInt(document.body.getAttribute("data-refresh"), 10) || 5000);
    if (window.ResizeObserver) {
      new ResizeObserver(function () {
        if (plot !== null) plot.setSize({width: width(), height: 170});
      }).observe(box);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll(".chart[data-series]").forEach(setup);
  });
})();
