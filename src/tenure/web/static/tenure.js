// Live updates for the dashboard: counts refresh on a timer; the regions of a list page
// (runs, queues, charts, leases, dead letters) are re-read from the page's own address and
// swapped in place; a run's page follows its event stream, shows the answer of a streaming
// model call as it grows, and re-reads its regions when something happens (never the whole
// page while the run goes on: a reload would drop the answer so far, which on PostgreSQL
// cannot be read again) and reloads once the run has ended. No framework, nothing from
// elsewhere.
"use strict";

var LIVE_MS = 2000;

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

// Re-read this page and replace each live region by its new version. A region holding the
// focus (a person typing or choosing in it) is left alone until they are done.
function refreshRegions(selector) {
  fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
    .then(function (r) { return r.ok ? r.text() : null; })
    .then(function (html) {
      if (!html) return;
      var fresh = new DOMParser().parseFromString(html, "text/html");
      document.querySelectorAll(selector || "[data-live-region]").forEach(function (el) {
        if (!el.id || el.contains(document.activeElement)) return;
        var next = fresh.getElementById(el.id);
        if (next && next.innerHTML !== el.innerHTML) el.innerHTML = next.innerHTML;
      });
      document.body.setAttribute("data-refreshed", String(Date.now()));
    })
    .catch(function () {});
}

// The text of the model call in flight grows as its deltas arrive (a new sequence: the call
// started over, e.g. retried after a failure). Hidden content shows only its length.
var answer = { sequence: null, chars: 0 };
function showDelta(d) {
  var box = document.getElementById("answer");
  var text = document.getElementById("answer-text");
  if (!box || !text) return;
  if (d.sequence !== answer.sequence) {
    answer = { sequence: d.sequence, chars: 0 };
    text.textContent = "";
  }
  answer.chars += d.chars;
  if (d.text === "<hidden>") text.textContent = "<hidden> (" + answer.chars + " characters so far)";
  else text.textContent += d.text;
  box.setAttribute("data-sequence", String(d.sequence));
  box.hidden = false;
}

function followRun(url) {
  if (!window.EventSource) return;
  var source = new EventSource(url);
  var timer = null;
  function soon(then) {
    if (timer) return;
    timer = setTimeout(function () { timer = null; then(); }, 400);
  }
  source.addEventListener("event", function () {
    soon(function () { refreshRegions("[data-run-region]"); });
  });
  source.addEventListener("delta", function (e) { showDelta(JSON.parse(e.data)); });
  source.addEventListener("end", function () {
    source.close();
    if (timer) clearTimeout(timer);
    timer = null;
    soon(function () { window.location.reload(); });
  });
}

document.addEventListener("DOMContentLoaded", function () {
  var counts = document.querySelector("[data-live]");
  if (counts || document.querySelector("[data-count]")) {
    var url = counts ? counts.getAttribute("data-live") : "/api/counts";
    setInterval(function () { refreshCounts(url); }, LIVE_MS);
  }
  if (document.querySelector("[data-live-region]")) {
    setInterval(refreshRegions, LIVE_MS);
  }
  var live = document.querySelector("[data-stream]");
  if (live) followRun(live.getAttribute("data-stream"));
});
