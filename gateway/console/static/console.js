// Live overview: re-fetch the fragment named by [data-refresh] every 5 s (same origin only).
"use strict";
(function () {
  var live = document.querySelector("[data-refresh]");
  if (!live) { return; }
  var url = live.getAttribute("data-refresh");
  if (!url || url.charAt(0) !== "/") { return; }
  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 200 && !r.redirected) { return r.text(); }
        return null;
      })
      .then(function (html) {
        if (html !== null) { live.innerHTML = html; }
      })
      .catch(function () { /* the next round tries again */ });
  }
  setInterval(refresh, 5000);
})();
