// Setup wizard: six steps on one page. Each step draws live state from /api/setup/* and
// saves through /api/settings, so what the wizard writes is exactly what Settings shows.
"use strict";
(() => {
  const { call, say, hush, el } = rltray;
  const steps = Array.from(document.querySelectorAll(".step"));
  const links = Array.from(document.querySelectorAll("#steps a"));
  let index = Math.max(0, steps.findIndex((s) => "#" + s.id === location.hash));
  let agentTimer = null;
  let chosenModel = null;

  function show(i) {
    index = i;
    hush();
    steps.forEach((s, n) => { s.hidden = n !== i; });
    links.forEach((a, n) => a.classList.toggle("on", n === i));
    document.getElementById("back").disabled = i === 0;
    document.getElementById("next").textContent = i === steps.length - 1 ? "Finish" : "Next";
    history.replaceState(null, "", "#" + steps[i].id);
    clearInterval(agentTimer);
    if (steps[i].id === "agents") { loadAgents(); agentTimer = setInterval(loadAgents, 2000); }
    if (steps[i].id === "model" && !document.getElementById("model-list").dataset.loaded) loadModels();
    if (steps[i].id === "backend") loadBackend();
  }

  // -- saving the fields of a step ----------------------------------------------------
  // Only the fields changed on the page are sent: one sent as it was shown would put back
  // a value changed meanwhile elsewhere (a pause from the tray, a hand edit of config.toml).
  const SETTINGS = "input[name*='.'], select[name*='.']";  // "section.key"; pickers are not
  function shown(input) {
    if (input.type === "radio") return input.checked ? input.value : null;
    return input.type === "checkbox" ? String(input.checked) : input.value;
  }
  function remember(root) { root.querySelectorAll(SETTINGS).forEach((i) => { i.dataset.was = shown(i); }); }
  remember(document);

  function values(step) {
    const out = {};
    step.querySelectorAll(SETTINGS).forEach((input) => {
      if (input.type === "radio" && !input.checked) return;
      if (shown(input) === input.dataset.was) return;  // not changed here: left as it is now
      out[input.name] = input.type === "checkbox" ? input.checked : input.value;
    });
    return out;
  }

  async function save(step) {
    const data = values(step);
    if (!Object.keys(data).length) return true;
    step.querySelectorAll(".field .error").forEach((e) => e.remove());
    try {
      const result = await call("POST", "/api/settings", data);
      document.getElementById("save-status").textContent = result.changed.length ? "Saved." : "";
      remember(step);
      return true;
    } catch (err) {
      const fields = (err.data && err.data.error && err.data.error.fields) || {};
      for (const [key, message] of Object.entries(fields)) {
        const input = step.querySelector(`[name="${key}"]`);
        const where = input && input.closest(".field, .presets");
        if (where) where.append(el("p", { class: "error" }, message));
        else say(message, "error");
      }
      return false;
    }
  }

  document.getElementById("next").addEventListener("click", async () => {
    if (!(await save(steps[index]))) return;
    if (index < steps.length - 1) { show(index + 1); return; }
    const done = await call("POST", "/api/setup/finish");
    say(done.message, done.trainable ? "ok" : "warn");
    setTimeout(() => { location.href = "/"; }, done.trainable ? 800 : 4000);
  });
  document.getElementById("back").addEventListener("click", () => show(Math.max(0, index - 1)));
  links.forEach((a, n) => a.addEventListener("click", async (e) => { e.preventDefault(); if (await save(steps[index])) show(n); }));
  document.querySelectorAll("[data-mirror]").forEach((input) => {
    const other = document.getElementById(input.dataset.mirror);
    input.addEventListener("input", () => { other.value = input.value; });
    other.addEventListener("input", () => { input.value = other.value; });
  });

  // -- 1. agents -----------------------------------------------------------------------
  async function loadAgents() {
    const agents = await call("POST", "/api/setup/agents");
    const box = document.getElementById("agent-list");
    box.textContent = "";
    for (const a of agents) {
      let state;
      if (!a.detected) state = el("span", { class: "muted" }, "not found on this machine");
      else if (a.stale) state = el("span", { class: "warn" }, "hooks run another copy of rltray: install again");
      else if (!a.installed) state = el("span", {}, "hooks not installed");
      else if (a.waiting) state = el("span", { class: "waiting" }, "installed · waiting for the first event…");
      else state = el("span", { class: "ok" }, `installed · ${a.turns} turn${a.turns === 1 ? "" : "s"} arrived`);
      // hooks that run another copy of rltray (a moved clone, an older install) are
      // installed but capture nothing here: offer to point them at this one
      const install = el("button", { type: "button", "data-agent": a.name, "data-action": "install", disabled: !a.detected, class: "primary" }, a.installed ? "Install again" : "Install hooks");
      const uninstall = el("button", { type: "button", "data-agent": a.name, "data-action": "uninstall" }, "Uninstall");
      const button = !a.installed ? install : a.stale ? [install, " ", uninstall] : uninstall;
      const notes = a.notes.map((n) => el("p", { class: "note" }, n));
      box.append(el("div", { class: "agent", "data-name": a.name }, el("strong", {}, a.display_name), " ", state, " ", button, ...notes));
    }
  }
  document.getElementById("agent-list").addEventListener("click", async (event) => {
    const button = event.target.closest("[data-agent]");
    if (!button) return;
    button.disabled = true;
    const result = await call("POST", `/api/setup/agents/${button.dataset.agent}/${button.dataset.action}`).catch(() => null);
    if (result) {
      const report = document.getElementById("agent-report");
      report.textContent = result.lines.join("\n");
      report.hidden = false;
    }
    loadAgents();
  });

  // -- 2. model ------------------------------------------------------------------------
  // Ollama's models first: choosing one trains on the very GGUF Ollama serves (its blob),
  // so the adapter fits it by construction. Then folders and .gguf files found here, which
  // pair with an Ollama model chosen in the list below them.
  function shapeOf(m) {
    return `${m.model_type || m.architecture || "?"} · ${m.layers ?? "?"} layers · hidden ${m.hidden_size ?? "?"} · vocab ${m.vocab_size ?? "?"}`;
  }
  function choice(value, m, badge, problem, ollamaName, chosen) {
    const fit = m.memory && m.memory.message ? m.memory.message : "";
    return el("label", { class: "choice" },
      el("input", { type: "radio", name: "model-pick", value, "data-ollama": ollamaName || "", disabled: !!problem, checked: !problem && value === chosen }),
      " ", el("strong", {}, m.name), " ", el("span", { class: "badge" }, badge), el("br"),
      el("span", { class: problem ? "warn small" : "muted small" }, problem || shapeOf(m)), el("br"),
      problem ? "" : el("span", { class: m.memory && m.memory.fits === false ? "warn small" : "muted small" }, fit));
  }
  async function loadModels(folder) {
    const list = document.getElementById("model-list");
    const lookError = document.getElementById("model-look-error");
    lookError.textContent = "";
    let data;
    try {
      data = await call("POST", "/api/setup/models", { folder: folder || "" });
    } catch (err) {
      hush();
      lookError.textContent = err.message;
      return;
    }
    list.dataset.loaded = "1";
    list.textContent = "";
    const chosen = data.chosen.base_model;
    const served = data.ollama.models;
    list.append(el("h3", {}, "Models Ollama serves"));
    if (!data.ollama.running) list.append(el("p", { class: "warn small" }, data.ollama.error));
    if (!served.length) list.append(el("p", { class: "muted" }, data.ollama.running ? "Ollama serves no models yet: `ollama pull qwen2.5:0.5b`, for example." : "No Ollama models found in its files either."));
    for (const o of served) list.append(choice(o.blob || "", o, o.quantization || "ollama", o.blob_problem, o.name, chosen));
    list.append(el("h3", {}, "Model folders and GGUF files on this machine"));
    if (!data.models.length) list.append(el("p", { class: "muted" }, "None in the Hugging Face cache or ~/models; name a folder or a .gguf file above."));
    for (const m of data.models) list.append(choice(m.path, m, m.source, m.error, "", chosen));
    const ollama = document.getElementById("ollama-list");
    ollama.textContent = "";
    const select = el("select", { id: "ollama-pick", "aria-label": "Ollama model" }, el("option", { value: "" }, "(none: do not publish)"));
    for (const o of served) {
      select.append(el("option", { value: o.name, selected: o.name === data.chosen.ollama },
        `${o.name} — ${o.architecture || "?"}, ${o.layers ?? "?"} layers, hidden ${o.hidden_size ?? "?"}`));
    }
    // The model set now stays on offer when Ollama does not list it (not running, say):
    // saving the step must not quietly stop publishing.
    if (data.chosen.ollama && !served.some((o) => o.name === data.chosen.ollama)) {
      select.append(el("option", { value: data.chosen.ollama, selected: true },
        `${data.chosen.ollama} (set now; Ollama does not list it at the moment)`));
    }
    ollama.append(el("label", { for: "ollama-pick" }, "Publish trained versions to this Ollama model: "), select);
    chosenModel = chosen || null;
    document.getElementById("model-save").disabled = !chosenModel;
  }
  document.getElementById("model-look").addEventListener("click", () => loadModels(document.getElementById("model-folder").value));
  document.getElementById("model-list").addEventListener("change", (e) => {
    if (e.target.name !== "model-pick") return;
    document.getElementById("model-look-error").textContent = "";
    chosenModel = e.target.value;
    document.getElementById("model-save").disabled = false;
    const pick = document.getElementById("ollama-pick");
    if (e.target.dataset.ollama && pick) pick.value = e.target.dataset.ollama;
  });
  document.getElementById("model-save").addEventListener("click", async () => {
    const ollama = document.getElementById("ollama-pick");
    const box = document.getElementById("model-result");
    box.textContent = "";
    let result;
    try {
      result = await call("POST", "/api/setup/model", { path: chosenModel, ollama: ollama ? ollama.value : "" });
    } catch (err) {
      hush();
      box.append(el("p", { class: "error" }, err.message));
      return;
    }
    box.append(el("p", { class: "ok" }, "Saved."));
    if (result.same_file) box.append(el("p", { class: "ok" }, "rltray trains on the very file Ollama serves, so trained versions fit it."));
    else if (result.mismatches.length) {
      box.append(el("p", { class: "warn" }, "This pair does not match, so an adapter trained on it would not load in Ollama:"),
        el("ul", {}, result.mismatches.map((m) => el("li", {}, m))));
    } else if (ollama && ollama.value) box.append(el("p", { class: "ok" }, "The two models match."));
    else box.append(el("p", { class: "muted" }, "No Ollama model chosen: versions are trained and kept here, not published."));
  });

  // -- 3. backend ----------------------------------------------------------------------
  // A background job (the trainer environment, the remote check) followed once a second
  // until it stops; following another job of the same kind stops following the first.
  function jobFollower() {
    // Each follow has its own number: a reply that arrives after a newer follow began (a
    // slow server answering an earlier poll) is dropped, so it neither paints the old job
    // over the new one nor stops the new one's timer.
    let timer = null;
    let current = 0;
    return (id, render) => {
      clearInterval(timer);
      const mine = ++current;
      const tick = async () => {
        const job = await call("GET", `/api/jobs/${id}`);
        if (mine !== current) return;
        if (job.status !== "running") clearInterval(timer);
        render(job);
      };
      tick();
      timer = setInterval(tick, 1000);
    };
  }
  const followEnvJob = jobFollower();
  async function loadBackend() {
    const data = await call("POST", "/api/setup/backend");
    const box = document.getElementById("backend-info");
    box.textContent = "";
    const info = data.info;
    box.append(
      el("p", {}, "Trainer interpreter: ", el("code", {}, data.python), info.python ? ` (Python ${info.python})` : ""),
      el("p", { class: data.backend.name ? "ok" : "warn" }, data.backend.name ? `Backend: ${data.backend.name} — ${data.backend.message}` : data.backend.message),
      el("p", { class: "muted small" }, (info.modules || []).map((n) => `${n} ${info[n] ? "✓" : "✗"}`).join("  ")));
    document.getElementById("env-folder").textContent = data.env_folder;
    document.getElementById("env-packages").textContent = data.packages.join(", ");
    document.getElementById("env-box").hidden = false;
    if (data.job) followJob(data.job.id);
  }
  function followJob(id) {
    const bar = document.getElementById("env-progress");
    const log = document.getElementById("env-log");
    bar.hidden = false; log.hidden = false;
    document.getElementById("env-create").disabled = true;
    followEnvJob(id, (job) => {
      document.getElementById("env-fill").style.width = (job.status === "failed" ? 100 : job.percent ?? 5) + "%";
      bar.classList.toggle("failed", job.status === "failed");
      document.getElementById("env-step").textContent = job.status === "running" ? job.step + (job.percent != null ? ` (${job.percent}%)` : "…") : job.status === "done" ? "Done." : job.error;
      log.textContent = job.log.join("\n");
      if (job.status !== "running") {
        document.getElementById("env-create").disabled = false;
        if (job.status === "done") { say("Trainer environment ready."); loadBackend(); }
      }
    });
  }
  document.getElementById("env-create").addEventListener("click", async () => {
    const job = await call("POST", "/api/setup/trainer-env");
    followJob(job.id);
  });

  // -- 3b. a bigger machine (Ray over SSH): the fields save like any step's; the key, the
  // token, the host key and the check have routes of their own (web/remote_setup.py)
  const remoteBox = document.getElementById("remote-box");
  const followRemoteJob = jobFollower();
  function kept(id, value, what) {
    const out = document.getElementById(id);
    out.textContent = value === null ? "The OS keyring cannot be reached; see Settings." : value ? `${what} is in the keyring.` : `No ${what.toLowerCase()} kept yet.`;
    out.className = value ? "ok small" : "muted small";
  }
  function showRemote(data) {
    kept("remote-key-state", data.has_key, "The SSH key");
    kept("remote-token-state", data.has_token, "The Ray token");
    if (data.job) followCheck(data.job.id);
  }
  async function remoteCall(url, body, status) {
    // the fields first: the routes read the saved settings
    if (!(await save(steps[index]))) return null;
    try {
      return await call("POST", url, body);
    } catch (err) {
      hush();
      const out = document.getElementById(status);
      out.textContent = err.message;
      out.className = "error small";
      return null;
    }
  }
  remoteBox.addEventListener("toggle", async () => {
    if (remoteBox.open) showRemote(await call("POST", "/api/setup/remote"));
  });
  document.getElementById("remote-key").addEventListener("click", async () => {
    const data = await remoteCall("/api/setup/remote/key", { path: document.getElementById("w-rkey").value }, "remote-key-state");
    if (data) showRemote(data);
  });
  document.getElementById("remote-token").addEventListener("click", async () => {
    const input = document.getElementById("w-rtoken");
    const data = await remoteCall("/api/setup/remote/token", { token: input.value }, "remote-token-state");
    if (data) { input.value = ""; showRemote(data); }
  });
  let shownKey = "";
  document.getElementById("remote-hostkey-look").addEventListener("click", async () => {
    const out = document.getElementById("remote-hostkey");
    out.textContent = "Asking the host…";
    out.className = "small";
    const data = await remoteCall("/api/setup/remote/host-key", {}, "remote-hostkey");
    if (!data) return;
    shownKey = data.fingerprint;
    out.textContent = "";
    const accept = document.getElementById("remote-hostkey-accept");
    if (data.matches) {
      out.append(el("span", { class: "ok" }, "The host shows the accepted key "), el("code", {}, data.fingerprint), ".");
      accept.hidden = true;
    } else {
      out.append(`${data.host}:${data.port} shows `, el("code", {}, data.fingerprint), ". ",
        data.pinned ? el("strong", { class: "error" }, `That is not the accepted ${data.pinned}: the server was reinstalled, or someone is in between.`) : "",
        " Compare it with the server's own (", el("code", {}, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"), " there) before you accept it.");
      accept.hidden = false;
    }
  });
  document.getElementById("remote-hostkey-accept").addEventListener("click", async (event) => {
    const data = await remoteCall("/api/setup/remote/accept-host-key", { fingerprint: shownKey }, "remote-hostkey");
    if (!data) return;
    event.target.hidden = true;
    const out = document.getElementById("remote-hostkey");
    out.textContent = "";
    out.className = "small";
    out.append(el("span", { class: "ok" }, "Accepted: "), el("code", {}, data.host_key));
  });
  function followCheck(id) {
    const rows = document.getElementById("remote-rows");
    const result = document.getElementById("remote-result");
    const button = document.getElementById("remote-check");
    button.disabled = true;
    followRemoteJob(id, (job) => {
      rows.textContent = "";
      for (const r of (job.result.rows || [])) {
        rows.append(el("li", {}, el("strong", { class: r.ok ? "ok" : "error" }, r.ok ? "ok" : "failed"), ` ${r.name}: ${r.said}`));
      }
      if (job.status === "running") { result.textContent = job.step + "…"; result.className = "muted"; return; }
      button.disabled = false;
      result.textContent = job.status === "done" ? "Every step works: rounds will train on this machine." : job.error;
      result.className = job.status === "done" ? "ok" : "error";
    });
  }
  document.getElementById("remote-check").addEventListener("click", async () => {
    document.getElementById("remote-rows").textContent = "";
    const result = document.getElementById("remote-result");
    result.textContent = "Starting the check…";
    result.className = "muted";
    const job = await remoteCall("/api/setup/remote/check", {}, "remote-result");
    if (job) followCheck(job.id);
  });
  if (remoteBox.open) call("POST", "/api/setup/remote").then(showRemote);

  // -- 6. notifications ----------------------------------------------------------------
  document.getElementById("test-notify").addEventListener("click", async (event) => {
    event.target.disabled = true;
    const out = document.getElementById("notify-result");
    out.textContent = "Sending…";
    try {
      const result = await call("POST", "/api/setup/test-notification");
      out.textContent = result.message;
      out.className = result.shown ? "ok" : "warn";
    } catch (err) { out.textContent = err.message; out.className = "warn"; }
    event.target.disabled = false;
  });
  document.querySelectorAll("[data-snooze]").forEach((b) => b.addEventListener("click", async () => {
    const result = await call("POST", "/api/snooze", { until: b.dataset.snooze });
    say(result.snoozed_until ? "Notifications snoozed for an hour." : "Snooze ended.");
  }));

  show(index);
})();
