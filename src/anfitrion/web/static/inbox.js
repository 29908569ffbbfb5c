"use strict";
// The inbox's only script (the CSP allows no inline code). Two jobs:
//  1. The sign-in link `anfitrion serve` prints, /login#token=…: the token is in the fragment,
//     so it never reaches the server, a proxy's log or a Referer. This script takes it out of
//     the address bar (and the tab's history) before anything else, puts it in the sign-in
//     form and, when this browser already knows the reviewer's name and the person opened the
//     link themselves (the server says so), submits the form.
//  2. Live update of the pending list: the server sends an event (server-sent events, /events)
//     when the pending requests change; the script fetches the rows and swaps them, and shows
//     the count in the title. The rows are rendered and escaped by the server; no value is
//     interpolated.
(function () {
  const NAME_KEY = "anfitrion.reviewer";
  // the reviewer's name (not a secret); a browser may refuse storage: then it is asked each time
  const remembered = function () {
    try {
      return window.localStorage.getItem(NAME_KEY);
    } catch (error) {
      return null;
    }
  };
  const remember = function (value) {
    try {
      window.localStorage.setItem(NAME_KEY, value);
    } catch (error) {
      // nothing to do: the name is asked again next time
    }
  };
  const login = document.getElementById("login");
  if (login) {
    const name = login.elements.namedItem("name");
    const token = login.elements.namedItem("token");
    const fromLink = function () {
      const match = /^#token=([^&]+)/.exec(window.location.hash);
      if (!match) {
        return;
      }
      window.history.replaceState(null, "", window.location.pathname);
      let given = "";
      try {
        given = decodeURIComponent(match[1]);
      } catch (error) {
        given = "";
      }
      token.value = given;
      const note = document.querySelector(".from-link");
      if (note) {
        note.hidden = false;
      }
      const known = remembered();
      if (known) {
        name.value = known;
      }
      // the server allows it only when the person opened the link, not another site
      if (given && known && login.dataset.autoSignIn === "yes") {
        login.requestSubmit();
      } else if (known) {
        login.querySelector("button[type=submit]").focus();
      } else {
        name.focus();
      }
    };
    fromLink();
    // the link opened in a tab that already shows this page changes only the fragment
    window.addEventListener("hashchange", fromLink);
    login.addEventListener("submit", function () {
      if (name.value.trim()) {
        remember(name.value.trim());
      }
    });
    return;
  }
  const list = document.getElementById("pending");
  if (!list) {
    return;
  }
  const source = list.dataset.source;
  const baseTitle = document.title.replace(/^\(\d+\) /, "");
  let last = list.innerHTML;
  function showCount(count) {
    document.title = count > 0 ? "(" + count + ") " + baseTitle : baseTitle;
  }
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
      // the server restarted or the network dropped: the next event fetches again
    }
  }
  // server-sent events: the server says when the pending list changed (and how many wait);
  // the browser reconnects by itself after a drop
  const events = new EventSource(list.dataset.events, { withCredentials: true });
  events.addEventListener("pending", function (event) {
    let count = 0;
    try {
      count = Number(JSON.parse(event.data).count) || 0;
    } catch (error) {
      count = 0;
    }
    showCount(count);
    list.dataset.count = String(count);
    refresh();
  });
})();
