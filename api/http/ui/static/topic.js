// txnstream console, a topic's page: tabs, the message browser, publishing, resetting and
// deleting subscriptions, and the topic's settings. Every call goes to the HTTP API with
// the page's token (console.js's api()); everything shown is set as text, never markup.
"use strict";
(() => {
  const { api, showNotice, refresh } = window.txnstreamConsole;
  const messages = document.getElementById("tab-messages");
  const topic = messages.dataset.topic;
  const topicPath = `/v1/topics/${encodeURIComponent(topic)}`;
  const KEY_SCAN_LIMIT = Number(messages.dataset.keyScanLimit) || 10000;
  const FETCH_CHUNK = 1000; // entries per request while a key search scans

  const el = (tag, props = {}, ...children) => {
    const node = Object.assign(document.createElement(tag), props);
    node.append(...children);
    return node;
  };

  // ------------------------------------------------------------------------- tabs

  function showTab() {
    const wanted = location.hash.slice(1) || "overview";
    const panels = [...document.querySelectorAll("[data-panel]")];
    const name = panels.some((p) => p.dataset.panel === wanted) ? wanted : "overview";
    for (const panel of panels) panel.hidden = panel.dataset.panel !== name;
    for (const tab of document.querySelectorAll("[data-tab]")) {
      if (tab.dataset.tab === name) tab.setAttribute("aria-current", "page");
      else tab.removeAttribute("aria-current");
    }
    if (name === "overview") refresh();
    if (name === "settings") loadSettings();
    if (name === "messages" && !view.started) form.requestSubmit(); // the first page at once
  }
  window.addEventListener("hashchange", showTab);

  // ------------------------------------------------------------------- positions

  const parsePos = (text) => {
    const match = /^(\d+):(\d+)$/.exec(text || "");
    return match ? [Number(match[1]), Number(match[2])] : null;
  };
  const cmpPos = (a, b) => a[0] - b[0] || a[1] - b[1];

  // The position `count` entries before `pos` (markers count: a page is raw entries),
  // from the topic's ledger listing; the first retained entry at the latest.
  async function positionBefore(pos, count) {
    const { ledgers } = await api("GET", `${topicPath}/ledgers`);
    if (!ledgers.length) return "earliest";
    let index = ledgers.findLastIndex((l) => l.ledger <= pos[0]);
    if (index < 0) return "earliest";
    let entry = ledgers[index].ledger === pos[0] ? pos[1] : ledgers[index].entries;
    let remaining = count;
    for (;;) {
      if (entry >= remaining) return `${ledgers[index].ledger}:${entry - remaining}`;
      remaining -= entry;
      index -= 1;
      if (index < 0) return `${ledgers[0].ledger}:0`;
      entry = ledgers[index].entries;
    }
  }

  // --------------------------------------------------------------------- values

  function bytesOf(entry) {
    if ("value_b64" in entry) return Uint8Array.from(atob(entry.value_b64), (c) => c.charCodeAt(0));
    return new TextEncoder().encode(JSON.stringify(entry.value));
  }

  function base64Of(bytes) {
    let binary = "";
    for (const byte of bytes) binary += String.fromCharCode(byte);
    return btoa(binary);
  }

  const hexOf = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");

  function formatValue(entry, format) {
    if (entry.kind !== "data") return "";
    const isBytes = "value_b64" in entry;
    if (format === "base64") return isBytes ? entry.value_b64 : base64Of(bytesOf(entry));
    if (format === "hex") return hexOf(bytesOf(entry));
    if (!isBytes) {
      if (format === "text" && typeof entry.value === "string") return entry.value;
      return format === "text" ? JSON.stringify(entry.value) : JSON.stringify(entry.value, null, 2);
    }
    let text;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytesOf(entry));
    } catch (_) {
      return `bytes (base64): ${entry.value_b64}`; // not text: shown as it travels
    }
    if (format === "text") return text;
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (_) {
      return text;
    }
  }

  // ------------------------------------------------------------- transactions

  // The state of each transaction with data on the page: aborted (the fetch's list or an
  // abort marker), committed (a commit marker, or at or below the stable position and not
  // aborted), else asked from the API (open, committing, ...; "undecided" if refused).
  async function txnStates(page) {
    const states = new Map(page.aborted.map((a) => [a.txn, "aborted"]));
    for (const e of page.entries) {
      if (e.kind === "commit") states.set(e.txn, "committed");
      if (e.kind === "abort") states.set(e.txn, "aborted");
    }
    const stable = parsePos(page.stable_position);
    const ask = new Set();
    for (const e of page.entries) {
      if (e.kind !== "data" || !e.txn || states.has(e.txn)) continue;
      if (stable && cmpPos(parsePos(e.position), stable) <= 0) states.set(e.txn, "committed");
      else ask.add(e.txn);
    }
    await Promise.all(
      [...ask].map(async (txn) => {
        try {
          const info = await api("GET", `/v1/transactions/${encodeURIComponent(txn)}`);
          states.set(txn, info.state);
        } catch (_) {
          states.set(txn, "undecided");
        }
      }),
    );
    return states;
  }

  // -------------------------------------------------------------------- browser

  const form = document.getElementById("browse-form");
  const table = document.getElementById("browse");
  const body = table.querySelector("tbody");
  const empty = document.getElementById("browse-empty");
  const summary = document.getElementById("browse-summary");
  const backButton = document.getElementById("browse-back");
  const nextButton = document.getElementById("browse-next");
  // start: {from} or {timestamp}; history: the starts of the pages before this one
  const view = { start: null, next: null, history: [], page: null, states: new Map(), started: false, turn: 0 };

  function showModeFields() {
    const mode = form.elements.mode.value;
    for (const node of messages.querySelectorAll("[data-for-mode]")) {
      node.hidden = !node.dataset.forMode.split(" ").includes(mode);
    }
  }

  function fetchUrl(start, max) {
    const params = new URLSearchParams({ max: String(max), isolation: form.elements.isolation.value });
    if (start.timestamp) params.set("timestamp", start.timestamp);
    else params.set("from", start.from || "earliest");
    return `${topicPath}/fetch?${params}`;
  }

  function cell(text, className) {
    return el("td", { className: className || "", textContent: text });
  }

  function render() {
    const { page, states } = view;
    const format = form.elements.format.value;
    const markers = form.elements.markers.checked;
    const rows = [];
    for (const entry of page.entries) {
      if (entry.kind !== "data" && !markers) continue;
      const state = entry.txn ? states.get(entry.txn) || "" : "";
      const tr = el("tr");
      tr.dataset.position = entry.position;
      tr.dataset.kind = entry.kind;
      if (entry.kind === "data" && state) tr.dataset.txnState = state;
      if (entry.kind !== "data") tr.classList.add("marker");
      if (entry.kind === "data" && state === "aborted") tr.classList.add("aborted");
      if (entry.kind === "data" && !["aborted", "committed", ""].includes(state)) {
        tr.classList.add("pending");
      }
      const txnCell = cell(entry.txn || "-", "txn");
      if (entry.kind === "data" && state) {
        txnCell.append(" ", el("span", { className: `badge ${state}`, textContent: state }));
      }
      const properties = Object.entries(entry.properties || {}).map(([k, v]) => `${k}=${v}`);
      const published = new Date(entry.publish_time);
      const time = cell(published.toISOString().replace("T", " ").replace("Z", " UTC"), "time");
      time.title = published.toString();
      tr.append(
        cell(entry.position, "pos"),
        el("td", {}, el("span", { className: `kind ${entry.kind}`, textContent: entry.kind })),
        time,
        cell(entry.key == null ? "-" : entry.key),
        txnCell,
        cell(properties.join("\n") || "-", "props"),
        el("td", { className: "value" }, el("pre", { textContent: formatValue(entry, format) })),
      );
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    table.hidden = rows.length === 0;
    empty.hidden = rows.length !== 0;
  }

  // Show a page read for request `turn`; false (nothing shown) when a newer request was
  // made meanwhile: a slower, older answer must not overwrite a newer page.
  async function show(page, start, note, turn) {
    const states = await txnStates(page);
    if (turn !== view.turn) return false;
    Object.assign(view, { page, start, next: page.next, states });
    render();
    const range = page.entries.length
      ? `${page.entries[0].position} … ${page.entries[page.entries.length - 1].position}`
      : "nothing";
    summary.textContent = `${note || ""}${range} · stable position ${page.stable_position || "-"}` +
      ` · last confirmed ${page.last_confirmed || "-"}`;
    backButton.disabled = !view.history.length && !(start.from && start.from !== "earliest") &&
      !start.timestamp;
    nextButton.disabled = !page.entries.length; // nothing more yet (Read again later)
    return true;
  }

  async function loadPage(start, turn) {
    const size = Number(form.elements.size.value);
    await show(await api("GET", fetchUrl(start, size)), start, "", turn);
  }

  // A key search reads up to KEY_SCAN_LIMIT entries from `start` in chunks, keeping the
  // data entries with that key (a page at most); the next step starts after the last one.
  async function scanKey(start, turn) {
    const key = form.elements.key.value;
    const size = Number(form.elements.size.value);
    const found = [];
    const aborted = new Map();
    let from = start.from || "earliest";
    let scanned = 0;
    let last = null;
    let atEnd = false;
    while (scanned < KEY_SCAN_LIMIT && found.length < size) {
      const chunk = await api("GET", fetchUrl({ from }, Math.min(FETCH_CHUNK, KEY_SCAN_LIMIT - scanned)));
      last = chunk;
      for (const a of chunk.aborted) aborted.set(a.txn, a);
      if (!chunk.entries.length) {
        atEnd = true;
        break;
      }
      let next = chunk.next;
      for (const [i, entry] of chunk.entries.entries()) {
        scanned += 1;
        if (entry.kind === "data" && entry.key === key) found.push(entry);
        if (found.length === size) {
          next = i + 1 < chunk.entries.length ? chunk.entries[i + 1].position : chunk.next;
          break;
        }
      }
      from = next;
    }
    const page = {
      entries: found,
      aborted: [...aborted.values()],
      next: from,
      stable_position: last ? last.stable_position : null,
      last_confirmed: last ? last.last_confirmed : null,
    };
    const where = atEnd ? "to the end" : `up to ${from}`;
    const note = `Key “${key}”: ${found.length} found in ${scanned} entries scanned` +
      ` from ${start.from || "earliest"} ${where} · `;
    if (!(await show(page, start, note, turn))) return;
    backButton.disabled = !view.history.length;
    nextButton.disabled = atEnd;
  }

  function loadStart(start) {
    const turn = ++view.turn;
    return form.elements.mode.value === "key" ? scanKey(start, turn) : loadPage(start, turn);
  }

  async function firstStart() {
    const mode = form.elements.mode.value;
    if (mode === "time") {
      const value = form.elements.time.value;
      if (!value) throw new Error("choose a publish time");
      return { timestamp: new Date(value).toISOString() };
    }
    if (mode === "position" || mode === "key") {
      const value = form.elements.position.value.trim();
      if (value && !parsePos(value)) throw new Error(`${value} is not a position L:E`);
      return { from: value || "earliest" };
    }
    if (mode === "newest") {
      const stats = await api("GET", `${topicPath}/stats`);
      const end = parsePos(stats.last_confirmed);
      if (!end) return { from: "earliest" };
      return { from: await positionBefore([end[0], end[1] + 1], Number(form.elements.size.value)) };
    }
    return { from: "earliest" };
  }

  // Run an action; a failure becomes a notice naming what failed.
  async function guarded(what, step) {
    try {
      await step();
    } catch (err) {
      showNotice(`${what}: ${err.message}`, "error");
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    view.started = true;
    view.history = [];
    guarded("Messages", async () => loadStart(await firstStart()));
  });
  form.elements.mode.addEventListener("change", showModeFields);
  form.elements.format.addEventListener("change", () => view.page && render());
  form.elements.markers.addEventListener("change", () => view.page && render());
  nextButton.addEventListener("click", () =>
    guarded("Messages", async () => {
      const start = { from: view.next };
      view.history.push(view.start);
      await loadStart(start);
    }),
  );
  backButton.addEventListener("click", () =>
    guarded("Messages", async () => {
      if (view.history.length) {
        await loadStart(view.history.pop());
        return;
      }
      // reached by a seek: the page that ends where this one starts
      const first = view.page.entries.length ? parsePos(view.page.entries[0].position) : parsePos(view.next);
      if (!first) return;
      await loadStart({ from: await positionBefore(first, Number(form.elements.size.value)) });
    }),
  );

  // Open the browser at one position (after a publish).
  function browseAt(position) {
    form.elements.mode.value = "position";
    form.elements.position.value = position;
    showModeFields();
    form.requestSubmit();
    location.hash = "#messages";
  }

  // -------------------------------------------------------------------- publish

  const publishForm = document.getElementById("publish-form");

  function parseProperties(text) {
    const properties = {};
    for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
      const at = line.indexOf("=");
      if (at <= 0) throw new Error(`property “${line}” is not name=value`);
      properties[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    return properties;
  }

  publishForm.addEventListener("submit", (event) => {
    event.preventDefault();
    guarded("Publish", async () => {
      const f = publishForm.elements;
      const message = {};
      if (f.as.value === "json") {
        try {
          message.value = JSON.parse(f.value.value);
        } catch (err) {
          throw new Error(`the value is not JSON (${err.message}); publish it as text instead`);
        }
      } else {
        message.value = f.value.value;
      }
      if (f.key.value) message.key = f.key.value;
      const properties = parseProperties(f.properties.value);
      if (Object.keys(properties).length) message.properties = properties;
      const answer = await api("POST", `${topicPath}/messages`, { messages: [message] });
      const position = answer.positions[0];
      showNotice(`Published to ${topic} at ${position}. `, "ok");
      const link = el("a", { href: "#messages", textContent: "Show it", id: "published-show" });
      link.addEventListener("click", (e) => {
        e.preventDefault();
        browseAt(position);
      });
      document.getElementById("notice").append(link);
    });
  });

  // -------------------------------------------------------------- subscriptions

  const resetDialog = document.getElementById("reset-dialog");
  const resetForm = document.getElementById("reset-form");
  const resetError = el("p", { className: "notice error", hidden: true });
  resetForm.append(resetError);

  function showTargetFields() {
    const target = resetForm.elements.target.value;
    for (const node of resetForm.querySelectorAll("[data-for-target]")) {
      node.hidden = node.dataset.forTarget !== target;
    }
  }
  resetForm.elements.target.addEventListener("change", showTargetFields);
  document.getElementById("reset-cancel").addEventListener("click", () => resetDialog.close());

  function openReset(sub) {
    resetForm.reset();
    resetDialog.dataset.sub = sub;
    document.getElementById("reset-sub").textContent = sub;
    resetError.hidden = true;
    showTargetFields();
    resetDialog.showModal();
  }

  resetForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const sub = resetDialog.dataset.sub;
    const f = resetForm.elements;
    let target;
    if (f.target.value === "position") target = { position: f.position.value.trim() };
    else if (f.target.value === "time") {
      target = f.time.value ? { timestamp: new Date(f.time.value).toISOString() } : null;
    } else target = { position: f.target.value };
    try {
      if (!target || target.position === "") throw new Error("say where to start");
      const path = `${topicPath}/subscriptions/${encodeURIComponent(sub)}/seek`;
      const answer = await api("POST", path, target);
      resetDialog.close();
      showNotice(`Subscription ${sub} reset to ${answer.position}.`, "ok");
      refresh();
    } catch (err) {
      resetError.textContent = `Could not reset ${sub}: ${err.message}`;
      resetError.hidden = false;
    }
  });

  async function deleteSub(button) {
    const sub = button.dataset.deleteSub;
    const question = `Delete subscription ${sub} of ${topic}? Its cursor and acknowledgements are gone.`;
    if (!confirm(question)) return;
    button.disabled = true;
    try {
      await api("DELETE", `${topicPath}/subscriptions/${encodeURIComponent(sub)}`);
      showNotice(`Subscription ${sub} deleted.`, "ok");
    } catch (err) {
      showNotice(`Could not delete ${sub}: ${err.message}`, "error");
    } finally {
      button.disabled = false;
      refresh();
    }
  }

  document.addEventListener("click", (event) => {
    const reset = event.target.closest("button[data-reset-sub]");
    if (reset) openReset(reset.dataset.resetSub);
    const remove = event.target.closest("button[data-delete-sub]");
    if (remove) deleteSub(remove);
  });

  // ------------------------------------------------------------------- settings

  const UNITS_MS = [[86400000, "d"], [3600000, "h"], [60000, "min"], [1000, "s"], [1, "ms"]];
  const UNITS_B = [[1073741824, "GiB"], [1048576, "MiB"], [1024, "KiB"], [1, "B"]];
  const biggest = (value, units) => units.find(([unit]) => value % unit === 0) || units[units.length - 1];
  const human = (value, units) => {
    const [unit, name] = biggest(value, units);
    return `${value / unit} ${name}`;
  };

  // Fill a number input and its unit select with the largest unit the select offers
  // that divides the value.
  function fill(input, select, value) {
    if (value == null) {
      input.value = "";
      return;
    }
    const units = [...select.options].map((o) => Number(o.value)).sort((a, b) => b - a);
    const unit = units.find((u) => value % u === 0) || units[units.length - 1];
    select.value = String(unit);
    input.value = String(value / unit);
  }

  const retentionForm = document.getElementById("retention-form");
  const offloadForm = document.getElementById("offload-form");

  async function loadSettings() {
    let stats;
    try {
      stats = await api("GET", `${topicPath}/stats`);
    } catch (err) {
      showNotice(`Settings: ${err.message}`, "error");
      return;
    }
    const r = stats.retention || {};
    const limits = [];
    if (r.time_ms != null) limits.push(`older than ${human(r.time_ms, UNITS_MS)}`);
    if (r.size_bytes != null) limits.push(`beyond ${human(r.size_bytes, UNITS_B)}`);
    document.getElementById("retention-now").textContent = limits.join(" · ") || "keep all";
    fill(retentionForm.elements.time, retentionForm.elements.time_unit, r.time_ms);
    fill(retentionForm.elements.size, retentionForm.elements.size_unit, r.size_bytes);
    const o = stats.offload;
    const offloaded = `${stats.offloaded_ledgers} ledger(s) offloaded`;
    document.getElementById("offload-now").textContent = !o
      ? `no policy · ${offloaded}`
      : `${o.after_ms == null ? "only when run" : `after ${human(o.after_ms, UNITS_MS)}`}` +
        `, ${o.min_local_ledgers} kept local · ${offloaded}`;
    if (o) {
      fill(offloadForm.elements.after, offloadForm.elements.after_unit, o.after_ms);
      offloadForm.elements.min_local_ledgers.value = String(o.min_local_ledgers);
    }
  }

  const scaled = (input, select) =>
    input.value === "" ? null : Math.round(Number(input.value) * Number(select.value));

  retentionForm.addEventListener("submit", (event) => {
    event.preventDefault();
    guarded("Retention", async () => {
      const f = retentionForm.elements;
      const body = { time_ms: scaled(f.time, f.time_unit), size_bytes: scaled(f.size, f.size_unit) };
      await api("PUT", `${topicPath}/retention`, body);
      showNotice(`Retention of ${topic} saved.`, "ok");
      await loadSettings();
    });
  });

  offloadForm.addEventListener("submit", (event) => {
    event.preventDefault();
    guarded("Offload", async () => {
      const f = offloadForm.elements;
      const body = {
        after_ms: scaled(f.after, f.after_unit),
        min_local_ledgers: Number(f.min_local_ledgers.value || 1),
      };
      await api("PUT", `${topicPath}/offload`, body);
      showNotice(`Offload policy of ${topic} saved.`, "ok");
      await loadSettings();
    });
  });

  document.getElementById("offload-run").addEventListener("click", () =>
    guarded("Offload", async () => {
      const { offloaded } = await api("POST", `${topicPath}/offload/run`);
      showNotice(
        offloaded.length ? `Offloaded ledger(s) ${offloaded.join(", ")}.` : "Nothing to offload yet.",
        "ok",
      );
      await loadSettings();
    }),
  );

  showModeFields();
  showTab();
})();
