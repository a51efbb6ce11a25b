// txnstream console: refreshes the page's live region by short polling, sends the
// operator's token (if any) with every request, and aborts transactions through the
// API (topic.js adds a topic's browser, publishing and settings). No dependencies, no
// build step.
"use strict";
(() => {
  const TOKEN_KEY = "txnstream.console.token";
  const root = document.body.dataset.root || "";
  const live = document.getElementById("live");
  const statusEl = document.getElementById("status");
  const notice = document.getElementById("notice");
  const tokenForm = document.getElementById("token-form");
  const tokenInput = document.getElementById("token");
  let timer = null;
  let inFlight = false;

  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";
  const headers = () => (token() ? { Authorization: `Bearer ${token()}` } : {});

  function setStatus(text, isError) {
    statusEl.textContent = text;
    statusEl.classList.toggle("error", Boolean(isError));
  }

  function showNotice(text, kind) {
    notice.textContent = text;
    notice.className = `notice ${kind}`;
    notice.hidden = false;
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      if (body && body.error) return `${body.error.message} (${body.error.code})`;
    } catch (_) {
      /* not the API's error body */
    }
    return `HTTP ${response.status}`;
  }

  function liveUrl() {
    const url = new URL(live.dataset.live, location.href);
    for (const name of (live.dataset.params || "").split(/\s+/).filter(Boolean)) {
      const input = document.querySelector(`[data-filter] [name="${name}"]`);
      if (input && input.value) url.searchParams.set(name, input.value);
    }
    return url;
  }

  async function refresh() {
    if (!live || inFlight || live.closest("[hidden]")) return; // another tab is shown
    inFlight = true;
    try {
      const response = await fetch(liveUrl(), { headers: headers(), cache: "no-store" });
      const type = response.headers.get("content-type") || "";
      if (response.status === 401 || response.status === 403) {
        tokenForm.classList.add("needed");
        setStatus("token needed", true);
        showNotice(`The server refused the console: ${await errorText(response)}. ` +
          "Enter a token above.", "error");
        return;
      }
      if (!type.startsWith("text/html")) {
        setStatus(`refresh failed: ${await errorText(response)}`, true);
        return;
      }
      live.innerHTML = await response.text();
      tokenForm.classList.remove("needed");
      setStatus(`live · updated ${new Date().toLocaleTimeString()}`, false);
    } catch (_) {
      setStatus("server unreachable · retrying", true);
    } finally {
      inFlight = false;
    }
  }

  // One API call with the page's token: the parsed JSON body, or an Error saying what
  // the server refused (the API's error message and code).
  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: "no-store" };
    if (body !== undefined) {
      init.headers = { ...init.headers, "Content-Type": "application/json" };
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(`${root}${path}`, init);
    } catch (_) {
      throw new Error("the server is unreachable");
    }
    if (!response.ok) throw new Error(await errorText(response));
    return response.json();
  }

  // For the topic page's script (topic.js): the same token, notices and refresh.
  window.txnstreamConsole = { api, showNotice, refresh };

  function schedule() {
    clearTimeout(timer);
    const every = Number(live.dataset.pollMs) || 1000;
    timer = setTimeout(async () => {
      if (!document.hidden) await refresh();
      schedule();
    }, every);
  }

  async function abortTxn(button) {
    const txn = button.dataset.abort;
    if (!confirm(`Abort transaction ${txn}? Its messages will never be delivered.`)) return;
    button.disabled = true;
    try {
      const response = await fetch(`${root}/v1/transactions/${encodeURIComponent(txn)}/abort`, {
        method: "POST",
        headers: headers(),
      });
      if (response.ok) {
        showNotice(`Transaction ${txn} aborted.`, "ok");
      } else {
        showNotice(`Could not abort ${txn}: ${await errorText(response)}`, "error");
      }
    } catch (_) {
      showNotice(`Could not abort ${txn}: the server is unreachable.`, "error");
    } finally {
      button.disabled = false;
      await refresh();
    }
  }

  // A link to a page that needs the token (Metrics, admin only): a browser cannot add a
  // header to a navigation, so with a token set it is fetched with the token and shown
  // as a text page of its own.
  async function openWithToken(link) {
    try {
      const response = await fetch(link.href, { headers: headers(), cache: "no-store" });
      if (!response.ok) {
        showNotice(`${link.textContent}: ${await errorText(response)}`, "error");
        return;
      }
      const text = new Blob([await response.text()], { type: "text/plain;charset=utf-8" });
      window.open(URL.createObjectURL(text), "_blank");
    } catch (_) {
      showNotice(`${link.textContent}: the server is unreachable.`, "error");
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-abort]");
    if (button) abortTxn(button);
    const link = event.target.closest("a[data-with-token]");
    if (link && token()) {
      event.preventDefault();
      openWithToken(link);
    }
  });

  // Filters refresh at once and stay in the address (a reload keeps them).
  for (const form of document.querySelectorAll("[data-filter]")) {
    form.addEventListener("submit", (event) => event.preventDefault());
    form.addEventListener("input", () => {
      const url = new URL(location.href);
      for (const input of form.querySelectorAll("input[name]")) {
        if (input.value) url.searchParams.set(input.name, input.value);
        else url.searchParams.delete(input.name);
      }
      history.replaceState(null, "", url);
      refresh();
    });
  }

  // The token stays in this tab's sessionStorage only; the field never shows it.
  const showTokenState = () => {
    tokenInput.value = "";
    tokenInput.placeholder = token() ? "set for this tab" : "only when auth is on";
  };
  showTokenState();
  tokenForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = tokenInput.value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    showTokenState();
    notice.hidden = true;
    refresh();
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
    refresh();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });

  if (live) {
    refresh();
    schedule();
  } else {
    setStatus("", false);
  }
})();
