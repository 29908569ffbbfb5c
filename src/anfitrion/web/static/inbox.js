"use strict";
// Live update of the pending list: fetch the rows every two seconds and swap them when they
// change. The rows are rendered and escaped by the server; no value is interpolated here.
(function () {
  const list = document.getElementById("pending");
  if (!list) {
    return;
  }
  const source = list.dataset.source;
  let last = list.innerHTML;
  async function refresh() {
    try {
      const response = await fetch(source, { credentials: "same-origin", cache: "no-store" });
      if (response.ok) {
        const rows = await response.text();
        if (rows !== last) {
          list.innerHTML = rows;
          last = rows;
        }
      }
    } catch (error) {
      // the server restarted or the network dropped: try again at the next tick
    }
    window.setTimeout(refresh, 2000);
  }
  window.setTimeout(refresh, 2000);
})();
