// Live updates for the dashboard: counts refresh on a timer; a run's page follows its event
// stream and reloads when something happens. No framework, nothing from elsewhere.
"use strict";

function refreshCounts(url) {
  fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then(function (r) { return r.ok ? r.json() : null; })
    .then(function (c) {
      if (!c) return;
      var values = { total: c.total, dead_letters: c.dead_letters };
      Object.keys(c.by_status).forEach(function (k) { values["status:" + k] = c.by_status[k]; });
      Object.keys(c.by_reason).forEach(function (k) { values["reason:" + k] = c.by_reason[k]; });
      document.querySelectorAll("[data-count]").forEach(function (el) {
        var v = values[el.getAttribute("data-count")];
        if (v !== undefined && el.textContent !== String(v)) el.textContent = String(v);
      });
    })
    .catch(function () {});
}

function followRun(url) {
  if (!window.EventSource) return;
  var source = new EventSource(url);
  var timer = null;
  function reloadSoon() {
    if (timer) return;
    timer = setTimeout(function () { window.location.reload(); }, 400);
  }
  source.addEventListener("event", reloadSoon);
  source.addEventListener("end", function () { source.close(); reloadSoon(); });
}

document.addEventListener("DOMContentLoaded", function () {
  var counts = document.querySelector("[data-live]");
  if (counts || document.querySelector("[data-count]")) {
    var url = counts ? counts.getAttribute("data-live") : "/api/counts";
    setInterval(function () { refreshCounts(url); }, 2000);
  }
  var live = document.querySelector("[data-stream]");
  if (live) followRun(live.getAttribute("data-stream"));
});
