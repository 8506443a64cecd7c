// Josef console live charts: every element with class "chart" and a data-series attribute
// (a JSON list of series names) is drawn as an SVG line chart from /api/series and redrawn
// every data-refresh milliseconds. Labels are set with textContent (never parsed as HTML).
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 800, H = 140, PAD_L = 56, PAD_B = 18, PAD_T = 8;

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return (Math.round(v * 100) / 100).toString();
  }

  function draw(box, names, data) {
    const svg = box.querySelector("svg");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    let tMin = Infinity, tMax = -Infinity, vMax = 0, points = 0;
    names.forEach(function (n) {
      (data[n] || []).forEach(function (p) {
        tMin = Math.min(tMin, p[0]); tMax = Math.max(tMax, p[0]);
        vMax = Math.max(vMax, p[1]); points++;
      });
    });
    if (points < 2) {
      svg.appendChild(el("text", {x: PAD_L, y: H / 2, class: "empty"},
                         "collecting data (a point every few seconds)"));
      return;
    }
    if (vMax <= 0) vMax = 1;
    if (tMax === tMin) tMax = tMin + 1;
    const x = function (t) { return PAD_L + (t - tMin) / (tMax - tMin) * (W - PAD_L - 4); };
    const y = function (v) { return PAD_T + (1 - v / vMax) * (H - PAD_T - PAD_B); };
    svg.appendChild(el("line", {x1: PAD_L, y1: H - PAD_B, x2: W, y2: H - PAD_B, class: "axis"}));
    svg.appendChild(el("line", {x1: PAD_L, y1: PAD_T, x2: PAD_L, y2: H - PAD_B, class: "axis"}));
    svg.appendChild(el("text", {x: 4, y: PAD_T + 8, class: "axis-label"}, fmt(vMax)));
    svg.appendChild(el("text", {x: 4, y: H - PAD_B, class: "axis-label"}, "0"));
    const span = Math.round(tMax - tMin);
    svg.appendChild(el("text", {x: PAD_L, y: H - 4, class: "axis-label"},
                       "last " + span + " s"));
    const legend = el("g", {class: "legend"});
    names.forEach(function (n, i) {
      const pts = (data[n] || []).map(function (p) {
        return x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1);
      });
      if (pts.length) svg.appendChild(el("polyline", {points: pts.join(" "), class: "s" + (i % 3)}));
      const last = (data[n] || []).slice(-1)[0];
      const short = n.split(".").slice(-1)[0];
      legend.appendChild(el("text", {x: W - 200, y: PAD_T + 10 + 12 * i, class: "k" + (i % 3)},
                            short + (last ? ": " + fmt(last[1]) : "")));
    });
    svg.appendChild(legend);
  }

  function setup(box) {
    let names;
    try { names = JSON.parse(box.getAttribute("data-series")); } catch (e) { return; }
    const title = document.createElement("div");
    title.className = "title";
    title.textContent = box.getAttribute("data-label") || names.join(", ");
    box.appendChild(title);
    box.appendChild(el("svg", {viewBox: "0 0 " + W + " " + H}));
    const query = names.map(function (n) { return "name=" + encodeURIComponent(n); }).join("&");
    function refresh() {
      fetch("/api/series?" + query).then(function (r) { return r.json(); })
        .then(function (data) { draw(box, names, data); })
        .catch(function () { /* the banner says when the console cannot reach the cluster */ });
    }
    refresh();
    const every = parseInt(document.body.getAttribute("data-refresh"), 10) || 5000;
    setInterval(refresh, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".chart[data-series]").forEach(setup);
  });
})();
