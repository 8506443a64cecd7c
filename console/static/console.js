// Josef console page behaviour (no framework): the message browser's live tail (server-sent
// events from /topics/{name}/tail, rows added newest first, text only), forms sent in the
// background (data-async: the produce form, so a running tail keeps running) and a
// confirmation for destructive forms (data-confirm).
"use strict";
(function () {
  function cell(text, cls) {
    const td = document.createElement("td");
    if (cls) {
      const pre = document.createElement("pre");
      pre.className = cls;
      pre.textContent = text;
      td.appendChild(pre);
    } else {
      td.textContent = text;
    }
    return td;
  }

  function setupTail(panel) {
    const start = panel.querySelector("#tail-start");
    const stop = panel.querySelector("#tail-stop");
    const status = panel.querySelector("#tail-status");
    const body = panel.querySelector("#tail tbody");
    const max = 500;
    let source = null;

    function setRunning(on) {
      start.hidden = on;
      stop.hidden = !on;
    }

    start.addEventListener("click", function () {
      if (source) return;
      source = new EventSource(panel.getAttribute("data-tail-url"));
      status.textContent = "connecting";
      setRunning(true);
      source.addEventListener("status", function () {
        status.textContent = "live: waiting for new records";
        panel.setAttribute("data-live", "1");
      });
      source.addEventListener("problem", function (e) {
        status.textContent = "retrying: " + JSON.parse(e.data).message;
      });
      source.addEventListener("record", function (e) {
        const r = JSON.parse(e.data);
        const tr = document.createElement("tr");
        tr.appendChild(cell(String(r.partition)));
        tr.appendChild(cell(String(r.offset)));
        tr.appendChild(cell(r.time));
        tr.appendChild(cell(r.key, "key"));
        tr.appendChild(cell(r.value, "value"));
        tr.appendChild(cell(r.headers.map(function (h) { return h[0] + "=" + h[1]; }).join("\n"),
                            "header"));
        body.insertBefore(tr, body.firstChild);
        while (body.children.length > max) body.removeChild(body.lastChild);
        status.textContent = "live: " + body.children.length + " new records";
      });
    });
    stop.addEventListener("click", function () {
      if (source) source.close();
      source = null;
      panel.removeAttribute("data-live");
      status.textContent = "stopped";
      setRunning(false);
    });
  }

  function setupAsync(form) {
    const out = document.getElementById(form.getAttribute("data-async"));
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      out.textContent = "sending";
      fetch(form.action, {method: "POST", body: new URLSearchParams(new FormData(form)),
                          headers: {"Accept": "application/json"}})
        .then(function (r) { return r.json(); })
        .then(function (res) {
          out.textContent = res.message;
          out.className = res.ok ? "note" : "error";
        })
        .catch(function (err) { out.textContent = String(err); out.className = "error"; });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const panel = document.getElementById("tail-panel");
    if (panel) setupTail(panel);
    document.querySelectorAll("form[data-async]").forEach(setupAsync);
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.getAttribute("data-confirm"))) e.preventDefault();
      });
    });
  });
})();
