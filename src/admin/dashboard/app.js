"use strict";
// The stead dashboard: reads the admin JSON endpoints and redraws every few seconds. Data is
// only ever put into the page as text (never as markup), so workflow names cannot inject HTML.
(function () {
  const REFRESH_MS = 3000;
  const STATUSES = ["PENDING", "ENQUEUED", "DELAYED", "SUCCESS", "ERROR", "CANCELLED",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED"];
  const CANCELLABLE = new Set(["PENDING", "ENQUEUED", "DELAYED"]);
  const RESUMABLE = new Set(["CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]);
  const THROUGHPUT_MINUTES = 15;
  const BUCKET_SECONDS = 10;
  // The timeline shows this many steps more per "more steps"; their outputs load when opened.
  const STEP_PAGE = 200;

  // A token given as ?token= is sent as a bearer header with every API call.
  const token = new URLSearchParams(location.search).get("token") || "";
  // Where the page is served (`/` of its own server, or e.g. `/admin` nested in an app): every
  // API path is relative to it.
  const BASE = location.pathname.replace(/\/+$/, "");
  // A workflow's own URL: the page with `#workflow/<id>`.
  const LINK = "#workflow/";
  const state = { selected: null, timer: null, busy: false, again: false, offset: 0, reveal: false,
    steps: { id: null, shown: STEP_PAGE, opened: new Map() } };
  const $ = (sel) => document.querySelector(sel);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  async function api(path, options) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    if (options && options.body) headers["Content-Type"] = "application/json";
    const response = await fetch(BASE + path, Object.assign({ headers, cache: "no-store" }, options));
    let body = null;
    try { body = await response.json(); } catch (_) { /* not JSON */ }
    if (!response.ok) {
      const message = body && body.error ? body.error : response.status + " " + response.statusText;
      throw new Error(message);
    }
    return body;
  }

  function banner(message, kind) {
    const node = $("#banner");
    node.hidden = !message;
    node.textContent = message || "";
    node.className = kind || "";
  }

  function when(ms) {
    if (!ms) return "";
    const seconds = Math.round((Date.now() - ms) / 1000);
    if (seconds < 0) return "in " + duration(-seconds * 1000);
    if (seconds < 2) return "now";
    return duration(seconds * 1000) + " ago";
  }

  function duration(ms) {
    if (ms < 1000) return Math.max(0, Math.round(ms)) + " ms";
    const s = ms / 1000;
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min " + Math.round(s % 60) + " s";
    return Math.floor(m / 60) + " h " + (m % 60) + " min";
  }

  function timeCell(ms) {
    return el("td", { title: ms ? new Date(ms).toLocaleString() : "" }, when(ms));
  }

  function statusPill(status) {
    return el("span", { class: "pill s-" + status }, status);
  }

  // A workflow's status as shown: PAUSED while paused (its stored status, DBOS's, in the title).
  function workflowPill(w) {
    if (w.paused) {
      const pill = statusPill("PAUSED");
      pill.title = "stored status " + w.status + ", paused " + when(w.paused_at_ms);
      return pill;
    }
    return statusPill(w.stored_status ? w.stored_status + " (unknown)" : w.status);
  }

  // The buttons acting on workflow `w`: pause or resume, cancel, resume a stopped one.
  function workflowActions(w) {
    const button = (action, label, cls) => el("button", {
      type: "button", class: cls, dataset: { action, id: w.id },
    }, label);
    const live = CANCELLABLE.has(w.status);
    return [
      live && !w.paused && button("pause", "Pause"),
      (w.paused || RESUMABLE.has(w.status)) && button("resume", "Resume"),
      live && button("cancel", "Cancel", "danger"),
    ];
  }

  function json(value) {
    return el("pre", {}, value === undefined || value === null ? "null" : JSON.stringify(value, null, 2));
  }

  // An error as the text it says (`name: message`), not as escaped JSON.
  function errorText(e) {
    if (e === undefined || e === null) return "";
    if (typeof e === "string") return e;
    if (typeof e.message === "string") return (e.name ? e.name + ": " : "") + e.message;
    return JSON.stringify(e);
  }

  function errorBlock(e) {
    return el("pre", { class: "error-text" }, errorText(e));
  }

  // Filters ----------------------------------------------------------------------------------

  function buildStatusFilter() {
    const box = $("#status-filter");
    for (const status of STATUSES) {
      box.append(el("label", {},
        el("input", { type: "checkbox", name: "status", value: status }), " ",
        statusPill(status), " ", el("span", { class: "count muted", dataset: { count: status } })));
    }
  }

  function checkedStatuses() {
    return [...$("#filters").querySelectorAll("input[name=status]:checked")].map((i) => i.value);
  }

  // The text filters; the status chips count workflows under these alone.
  function textQuery() {
    const form = $("#filters");
    const query = new URLSearchParams();
    for (const key of ["name", "queue"]) {
      const value = form.elements[key].value.trim();
      if (value) query.set(key, value);
    }
    return query;
  }

  function listQuery() {
    const form = $("#filters");
    const query = textQuery();
    const statuses = checkedStatuses();
    if (statuses.length) query.set("status", statuses.join(","));
    query.set("limit", form.elements.limit.value);
    query.set("offset", state.offset);
    query.set("order", "desc");
    return query;
  }

  // A filter changed: back to the first page.
  function filtersChanged() {
    state.offset = 0;
    refresh();
  }

  function page(delta) {
    const limit = Number($("#filters").elements.limit.value);
    state.offset = Math.max(0, state.offset + delta * limit);
    refresh();
  }

  // "Open by id": the workflow's detail (its own URL), whatever the list shows.
  function openId(event) {
    event.preventDefault();
    const id = $("#open-form").elements.id.value.trim();
    if (id) select(id);
  }

  // Workflows --------------------------------------------------------------------------------

  async function loadWorkflows() {
    const [body, counted] = await Promise.all([api("/api/workflows?" + listQuery()),
      api("/api/counts?" + textQuery())]);
    for (const chip of $("#status-filter").querySelectorAll("[data-count]")) {
      chip.textContent = counted.counts[chip.dataset.count] || 0;
    }
    const statuses = checkedStatuses();
    const matching = statuses.length
      ? statuses.reduce((sum, s) => sum + (counted.counts[s] || 0), 0) : counted.total;
    const rows = body.workflows.map(workflowRow);
    $("#workflows tbody").replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: 8, class: "empty" }, "no workflows match"))]));
    const limit = Number($("#filters").elements.limit.value);
    const from = rows.length ? state.offset + 1 : state.offset;
    $("#workflow-count").textContent = "(" + from + "–" + (state.offset + rows.length)
      + " of " + matching + ", newest first)";
    $("#prev-page").disabled = state.offset === 0;
    $("#next-page").disabled = rows.length < limit;
  }

  function workflowRow(w) {
    const actions = el("td", {}, workflowActions(w));
    return el("tr", {
      class: w.id === state.selected ? "selected" : "",
      dataset: { workflowId: w.id, status: w.status, paused: w.paused ? "true" : "false" },
    },
    el("td", { class: "id", title: w.id }, w.id),
    el("td", {}, w.name),
    el("td", { class: "status" }, workflowPill(w)),
    el("td", {}, w.queue || ""),
    timeCell(w.created_at_ms),
    timeCell(w.updated_at_ms),
    el("td", { class: "error-preview", title: errorText(w.error) }, errorText(w.error)),
    actions);
  }

  async function act(action, id) {
    try {
      const body = await api("/api/workflows/" + encodeURIComponent(id) + "/" + action,
        { method: "POST", body: "{}" });
      banner(action + " " + id + ": now " + (body.paused ? "PAUSED" : body.status), "info");
    } catch (e) {
      banner(action + " " + id + " failed: " + e.message);
    }
    await refresh();
  }

  // Detail and timeline ----------------------------------------------------------------------

  async function loadDetail() {
    const id = state.selected;
    if (!id) return;
    if (state.steps.id !== id) state.steps = { id, shown: STEP_PAGE, opened: new Map() };
    const path = "/api/workflows/" + encodeURIComponent(id);
    const [w, steps] = await Promise.all([api(path), loadSteps(path)]);
    if (state.selected !== id) return;
    $("#detail").hidden = false;
    $("#detail-id").textContent = id;
    const meta = el("dl", { class: "meta" });
    const add = (label, value) => {
      if (value === undefined || value === null || value === "") return;
      meta.append(el("dt", {}, label), el("dd", {}, value));
    };
    add("name", w.name);
    add("status", workflowPill(w));
    add("paused", w.paused && new Date(w.paused_at_ms).toLocaleString());
    add("queue", w.queue);
    add("executor", w.executor_id);
    add("version", w.app_version);
    add("created", new Date(w.created_at_ms).toLocaleString());
    add("completed", w.completed_at_ms && new Date(w.completed_at_ms).toLocaleString());
    add("parent", w.parent_workflow_id);
    add("forked from", w.forked_from);
    // A continue-as-new chain: each run links to the one before and after it.
    const chainLink = (to) => to && el("a", {
      class: "chain-link", href: LINK + encodeURIComponent(to),
      onclick: (e) => { e.preventDefault(); select(to); },
    }, to);
    add("continued from", chainLink(w.continued_from));
    add("continued as", chainLink(w.continued_as));
    add("recovery attempts", w.recovery_attempts);
    add("input", json(w.input));
    if (w.output !== null) add("output", json(w.output));
    if (w.error) add("error", errorBlock(w.error));
    $("#detail-meta").replaceChildren(meta);
    $("#detail-actions").replaceChildren(...workflowActions(w).filter(Boolean));
    $("#timeline").replaceChildren(timeline(w, steps.list), steps.more ? el("button", {
      type: "button", id: "more-steps",
      onclick: () => { state.steps.shown += STEP_PAGE; refresh(); },
    }, "more steps") : null);
    // Opened by the user: bring it into view (it sits below the list).
    if (state.reveal) {
      state.reveal = false;
      $("#detail").scrollIntoView({ block: "start" });
    }
  }

  // The steps shown, in pages without outputs (each starts after the last one's end).
  async function loadSteps(path) {
    const list = [];
    let after = null;
    do {
      const limit = Math.min(STEP_PAGE, state.steps.shown - list.length);
      const query = new URLSearchParams({ outputs: "false", limit });
      if (after !== null) query.set("after", after);
      const page = await api(path + "/steps?" + query);
      list.push(...page.steps);
      after = page.next_after;
    } while (after !== null && list.length < state.steps.shown);
    return { list, more: after !== null };
  }

  // A step's output or error, loaded when its details are opened and kept while they stay open.
  function stepDetails(s) {
    const opened = state.steps.opened;
    const size = (n) => (n >= 1024 ? (n / 1024).toFixed(n >= 10240 ? 0 : 1) + " KiB" : n + " B");
    const label = s.error_bytes !== null ? "error (" + size(s.error_bytes) + ")"
      : s.output_bytes !== null ? "output (" + size(s.output_bytes) + ")" : "no output";
    const body = el("div", { class: "step-output" });
    const fill = (full) => body.replaceChildren(full.error ? errorBlock(full.error) : json(full.output));
    const details = el("details", { open: opened.has(s.function_id) }, el("summary", {}, label), body);
    if (opened.get(s.function_id)) fill(opened.get(s.function_id));
    details.addEventListener("toggle", async () => {
      if (!details.open) {
        opened.delete(s.function_id);
        return;
      }
      if (opened.get(s.function_id)) return;
      opened.set(s.function_id, null);
      body.replaceChildren(el("span", { class: "muted" }, "loading…"));
      try {
        const full = await api("/api/workflows/" + encodeURIComponent(state.steps.id) + "/steps/"
          + s.function_id);
        if (opened.has(s.function_id)) opened.set(s.function_id, full);
        fill(full);
      } catch (e) {
        opened.delete(s.function_id);
        body.replaceChildren(errorBlock(e.message));
      }
    });
    return details;
  }

  function timeline(w, steps) {
    if (!steps.length) {
      const final = !CANCELLABLE.has(w.status);
      return el("div", { class: "empty" }, final ? "no recorded steps" : "no recorded steps yet");
    }
    const now = Date.now();
    const live = CANCELLABLE.has(w.status);
    // A sleep records its wake-up time as its completion when it starts: while the workflow runs
    // and that time is ahead, the step is waiting, not done.
    const wakes = (s) => (s.name === "DBOS.sleep" && live && s.completed_at_ms > now
      ? s.completed_at_ms : null);
    const endOf = (s) => (wakes(s) ? now : Math.min(s.completed_at_ms || now, now));
    const starts = steps.map((s) => s.started_at_ms).filter(Boolean);
    const begin = Math.min(w.started_at_ms || w.created_at_ms, ...starts);
    const end = Math.max(w.completed_at_ms || 0, ...steps.map(endOf), begin + 1);
    const span = end - begin;
    const box = el("div", { class: "steps" });
    for (const s of steps) {
      const from = (s.started_at_ms || begin) - begin;
      const to = endOf(s) - begin;
      const until = wakes(s);
      const bar = el("span", {});
      bar.style.left = (100 * from / span).toFixed(2) + "%";
      bar.style.width = (100 * Math.max(to - from, 0) / span).toFixed(2) + "%";
      const took = until ? "waiting, wakes " + when(until)
        : s.started_at_ms && s.completed_at_ms ? duration(s.completed_at_ms - s.started_at_ms) : "";
      const cls = "step" + (s.error_bytes !== null ? " failed" : "") + (until ? " waiting" : "");
      box.append(el("div", { class: cls, dataset: { step: s.function_id } },
        el("span", { class: "muted" }, "#" + s.function_id),
        el("span", { title: s.name }, s.name, s.child_workflow_id ? " → " + s.child_workflow_id : ""),
        el("div", { class: "track", title: "+" + duration(from) }, bar),
        el("span", { class: "muted" }, took),
        stepDetails(s)));
    }
    return box;
  }

  async function fork(event) {
    event.preventDefault();
    const step = Number($("#fork-form").elements.step.value);
    try {
      const body = await api("/api/workflows/" + encodeURIComponent(state.selected) + "/fork", {
        method: "POST", body: JSON.stringify({ step }),
      });
      banner("forked " + state.selected + " from step " + step + " as " + body.id, "info");
      select(body.id);
    } catch (e) {
      banner("fork failed: " + e.message);
    }
  }

  function linkedId() {
    return location.hash.startsWith(LINK)
      ? decodeURIComponent(location.hash.slice(LINK.length)) || null : null;
  }

  // Selecting a workflow gives it its URL (so it can be shared, and Back returns to the list).
  function select(id, fromLink) {
    if (!fromLink && linkedId() !== id) {
      history.pushState(null, "", id ? LINK + encodeURIComponent(id)
        : location.pathname + location.search);
    }
    state.selected = id;
    state.reveal = Boolean(id);
    for (const row of document.querySelectorAll("#workflows tbody tr")) {
      row.classList.toggle("selected", row.dataset.workflowId === id);
    }
    if (!id) $("#detail").hidden = true;
    refresh();
  }

  // Queues and throughput --------------------------------------------------------------------

  function limitsText(q) {
    const parts = [];
    if (q.concurrency) parts.push("global " + q.concurrency);
    if (q.worker_concurrency) parts.push("per worker " + q.worker_concurrency);
    if (q.rate_limit) parts.push(q.rate_limit.limit + " / " + duration(q.rate_limit.period_ms));
    if (q.partitioned) parts.push("partitioned");
    if (q.partition_concurrency) parts.push("per partition " + q.partition_concurrency);
    if (q.priority_enabled) parts.push("priority");
    return parts.length ? parts.join(", ") : "none";
  }

  async function loadQueues() {
    const body = await api("/api/queues");
    $("#queues tbody").replaceChildren(...body.queues.map((q) => {
      const cap = q.concurrency || q.worker_concurrency;
      const fill = el("span", {});
      fill.style.width = Math.min(100, cap ? 100 * q.running / cap : (q.running ? 100 : 0)) + "%";
      return el("tr", { dataset: { queue: q.name } },
        el("td", {}, q.internal ? el("span", { class: "muted", title: q.name }, "internal") : q.name),
        el("td", { class: "app" }, q.app || el("span", { class: "muted" }, "all")),
        el("td", {}, limitsText(q)),
        el("td", { class: "num" }, q.depth),
        el("td", { class: "num lag", title: "how long the oldest waiting workflow has waited" },
          q.depth ? duration(q.lag_ms) : el("span", { class: "muted" }, "—")),
        el("td", { class: "num" }, q.running),
        el("td", { title: cap ? q.running + " of " + cap : q.running + " running" },
          el("div", { class: "bar" }, fill)),
        el("td", {}, q.paused && el("span", { class: "pill s-PAUSED",
          title: "paused " + when(q.paused_at_ms) }, "PAUSED"), " ",
        el("button", { type: "button", dataset: { queueAction: q.paused ? "resume" : "pause",
          queue: q.name } }, q.paused ? "Resume" : "Pause")));
    }));
  }

  async function actOnQueue(action, name) {
    try {
      await api("/api/queues/" + encodeURIComponent(name) + "/" + action,
        { method: "POST", body: "{}" });
      banner(action + " queue " + name + ": now " + (action === "pause" ? "paused" : "running"), "info");
    } catch (e) {
      banner(action + " queue " + name + " failed: " + e.message);
    }
    await refresh();
  }

  async function loadExecutors() {
    const [body, stranded] = await Promise.all([api("/api/executors"), api("/api/stranded")]);
    $("#executors tbody").replaceChildren(...body.executors.map((e) =>
      el("tr", { dataset: { executor: e.executor_id } },
        el("td", {}, e.executor_id),
        el("td", {}, e.host + " (" + e.pid + ")"),
        el("td", {}, e.app_version),
        el("td", {}, e.app_name || "—"),
        el("td", { class: "num" }, e.pending),
        el("td", {}, el("span", { class: "pill " + (e.live ? "up" : "down") }, e.live ? "live" : "dead")),
        timeCell(e.last_seen_ms))));
    const n = stranded.workflows.length;
    $("#stranded-caption").textContent = n
      ? n + " stranded workflow(s): stead workflow stranded --move-to <version>"
      : "";
  }

  async function loadThroughput() {
    const body = await api("/api/throughput?minutes=" + THROUGHPUT_MINUTES + "&bucket=" + BUCKET_SECONDS);
    const buckets = body.buckets;
    const total = buckets.reduce((n, b) => n + b.succeeded + b.failed, 0);
    $("#throughput-caption").textContent = "completed per " + BUCKET_SECONDS + " s, last "
      + THROUGHPUT_MINUTES + " min (" + total + " in all)";
    $("#throughput").innerHTML = chart(buckets, body.bucket_ms);
  }

  // Only numbers and fixed words go into this markup.
  function chart(buckets, bucketMs) {
    const W = 600, H = 140, top = 12, bottom = 18, left = 28;
    const max = Math.max(1, ...buckets.map((b) => b.succeeded + b.failed));
    const step = (W - left) / Math.max(1, buckets.length);
    const scale = (H - top - bottom) / max;
    let bars = "";
    buckets.forEach((b, i) => {
      const x = (left + i * step).toFixed(1), w = Math.max(1, step - 1).toFixed(1);
      const ok = b.succeeded * scale, bad = b.failed * scale;
      const base = H - bottom;
      const label = new Date(b.start_ms).toLocaleTimeString() + ": " + Number(b.succeeded)
        + " succeeded, " + Number(b.failed) + " failed";
      bars += "<g><title>" + label + "</title>"
        + "<rect class=\"ok\" x=\"" + x + "\" y=\"" + (base - ok).toFixed(1) + "\" width=\"" + w
        + "\" height=\"" + ok.toFixed(1) + "\"></rect>"
        + "<rect class=\"bad\" x=\"" + x + "\" y=\"" + (base - ok - bad).toFixed(1) + "\" width=\""
        + w + "\" height=\"" + bad.toFixed(1) + "\"></rect></g>";
    });
    const minutes = Math.round(buckets.length * bucketMs / 60000);
    return "<svg viewBox=\"0 0 " + W + " " + H + "\" preserveAspectRatio=\"none\" role=\"img\">"
      + "<line class=\"axis\" x1=\"" + left + "\" y1=\"" + (H - bottom) + "\" x2=\"" + W + "\" y2=\""
      + (H - bottom) + "\"></line>"
      + "<text x=\"0\" y=\"" + (top + 4) + "\">" + max + "</text>"
      + "<text x=\"0\" y=\"" + (H - bottom) + "\">0</text>"
      + "<text x=\"" + left + "\" y=\"" + (H - 4) + "\">−" + minutes + " min</text>"
      + "<text x=\"" + (W - 24) + "\" y=\"" + (H - 4) + "\">now</text>"
      + bars + "</svg>";
  }

  async function loadHealth() {
    const pill = $("#health");
    try {
      await api("/readyz");
      pill.textContent = "database ready";
      pill.className = "pill up";
    } catch (e) {
      pill.textContent = "not ready";
      pill.title = e.message;
      pill.className = "pill down";
    }
  }

  // Refresh loop -----------------------------------------------------------------------------

  // One refresh at a time; a request for another while one runs (after an action) runs next.
  async function refresh() {
    if (state.busy) {
      state.again = true;
      return;
    }
    state.busy = true;
    state.again = false;
    try {
      const results = await Promise.allSettled([loadWorkflows(), loadQueues(), loadThroughput(),
        loadHealth(), loadDetail(), loadExecutors()]);
      const failed = results.find((r) => r.status === "rejected");
      if (failed) banner(failed.reason.message);
      else if ($("#banner").className !== "info") banner("");
      $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    } finally {
      state.busy = false;
    }
    if (state.again) await refresh();
  }

  function schedule() {
    clearInterval(state.timer);
    state.timer = $("#auto").checked ? setInterval(refresh, REFRESH_MS) : null;
  }

  function wire() {
    buildStatusFilter();
    $("#filters").addEventListener("change", filtersChanged);
    $("#filters").addEventListener("submit", (e) => { e.preventDefault(); filtersChanged(); });
    $("#filters").addEventListener("input", (e) => { if (e.target.type === "text") filtersChanged(); });
    $("#open-form").addEventListener("submit", openId);
    $("#prev-page").addEventListener("click", () => page(-1));
    $("#next-page").addEventListener("click", () => page(1));
    $("#refresh").addEventListener("click", refresh);
    $("#auto").addEventListener("change", schedule);
    $("#detail-close").addEventListener("click", () => select(null));
    $("#fork-form").addEventListener("submit", fork);
    $("#detail-actions").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) {
        button.disabled = true;
        act(button.dataset.action, button.dataset.id);
      }
    });
    $("#queues tbody").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-queue-action]");
      if (button) {
        button.disabled = true;
        actOnQueue(button.dataset.queueAction, button.dataset.queue);
      }
    });
    $("#workflows tbody").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) {
        button.disabled = true;
        act(button.dataset.action, button.dataset.id);
        return;
      }
      const row = event.target.closest("tr[data-workflow-id]");
      if (row) select(row.dataset.workflowId);
    });
    window.addEventListener("popstate", () => select(linkedId(), true));
    window.addEventListener("hashchange", () => select(linkedId(), true));
    state.selected = linkedId();
    schedule();
    refresh();
  }

  wire();
})();
