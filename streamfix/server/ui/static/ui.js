// streamfix operator page: the one script the page's CSP allows (served
// from /ui/static/). Nothing here is needed to use the page; it only
// saves clicks. No data from the page is ever written as HTML.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Filters apply as soon as one is chosen.
  document.querySelectorAll("select.autosubmit").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });
  // A page showing a running probe reloads itself until the probe ends.
  var running = document.querySelector("[data-refresh]");
  if (running) {
    var seconds = Number(running.getAttribute("data-refresh")) || 2;
    window.setTimeout(function () { window.location.reload(); }, seconds * 1000);
  }
  // A button is pressed once: a second reload or probe waits for the first.
  document.querySelectorAll("form[method=post]").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    });
  });
});
