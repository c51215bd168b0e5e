// Lessons page: keyboard (j/k move, e or Enter edit, m mute, p pin), inline editing (Enter saves,
// Esc cancels, empty goes back to your own comment), the actions, the turns behind a lesson,
// adding one, and the preview with its budget bar. Every change is one JSON call; the list is
// then redrawn by the server (/lessons/list), since one change can move other lessons too.
// "Suggest wording" only shows what the user's local model offers; Accept saves it as an edit.
"use strict";
(() => {
  const { call, say, el } = rltray;
  const listBox = document.getElementById("lesson-list");
  const cards = () => Array.from(listBox.querySelectorAll(".lesson"));
  const cardOf = (key) => cards().find((c) => c.dataset.key === key);
  let current = null;

  // Numbers and days by hand: Intl throws under WebKitGTK's "C" language (see locale.js)
  const num = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  function day(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return iso || "";
    const two = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}`;
  }

  function focusCard(card) {
    if (!card) return;
    cards().forEach((c) => c.classList.toggle("current", c === card));
    current = card;
    card.focus({ preventScroll: true });
    card.scrollIntoView({ block: "nearest" });
  }

  let drawn = 0;  // two quick changes: only the newer list is drawn
  async function redraw(focusKey) {
    const mine = ++drawn;
    const open = new Set(Array.from(listBox.querySelectorAll("details[open]")).map((d) => d.dataset.turns));
    const response = await fetch("/lessons/list", { credentials: "same-origin" });
    if (!response.ok) { say(`The lessons could not be redrawn (HTTP ${response.status}).`, "error"); return; }
    const html = await response.text();
    if (mine !== drawn) return;
    listBox.innerHTML = html;
    listBox.querySelectorAll("details[data-turns]").forEach((d) => { if (open.has(d.dataset.turns)) d.open = true; });
    current = null;
    if (focusKey) focusCard(cardOf(focusKey));
    loadPreview();
  }

  async function change(key, path, body, said) {
    await call("POST", `/api/lessons/${encodeURIComponent(key)}/${path}`, body);
    say(said);
    await redraw(key);
  }

  // -- inline editing ------------------------------------------------------------------
  function edit(card) {
    const words = card.querySelector(".words");
    if (words.querySelector("input")) return;
    const before = words.textContent;
    const input = el("input", { type: "text", value: before, maxlength: "500", "aria-label": "The lesson's words" });
    words.textContent = "";
    words.append(input);
    input.focus();
    input.select();
    const cancel = () => { words.textContent = before; focusCard(card); };
    input.addEventListener("keydown", async (event) => {
      if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); cancel(); }
      if (event.key !== "Enter") return;
      event.preventDefault();
      event.stopPropagation();
      const text = input.value.trim();
      try {
        await change(card.dataset.key, "words", { text },
          text ? `Lesson ${card.dataset.key} reworded.` : `Lesson ${card.dataset.key} is back to your own comment's words.`);
      } catch (err) { input.focus(); }  // the call said why; the words stay editable
    });
  }

  // -- a wording by the user's local model: shown with Accept / Discard, saved only on Accept --
  async function suggest(card, button) {
    const key = card.dataset.key;
    const box = card.querySelector(".suggestion");
    button.disabled = true;
    box.hidden = false;
    box.textContent = "Asking your local model (Ollama)…";
    let got = null;
    try { got = await call("POST", `/api/lessons/${encodeURIComponent(key)}/suggest`, {}); }
    catch (err) { box.hidden = true; box.textContent = ""; }  // the call said why
    finally { button.disabled = false; }
    if (!got) return;
    const accept = () => change(key, "words", { text: got.text }, `Lesson ${key} reworded as ${got.model} suggested.`).catch(() => {});
    const discard = () => { box.hidden = true; box.textContent = ""; say(`Lesson ${key} keeps its words.`); };
    box.textContent = "";
    box.append(
      el("span", { class: "muted" }, `${got.model} suggests: `), el("q", { class: "suggested" }, got.text), " ",
      el("button", { type: "button", class: "good", "data-suggestion": "accept", onclick: accept }, "Accept"),
      el("button", { type: "button", "data-suggestion": "discard", onclick: discard }, "Discard"));
  }

  // -- actions -------------------------------------------------------------------------
  async function act(button) {
    const card = button.closest(".lesson");
    const key = card.dataset.key;
    const what = button.dataset.act;
    if (what === "edit") return edit(card);
    if (what === "suggest") return suggest(card, button);
    if (what === "mute" || what === "pin") {
      const on = button.dataset.on === "1";
      const past = what === "mute" ? (on ? "muted" : "unmuted") : (on ? "pinned" : "unpinned");
      return change(key, what, { on }, `Lesson ${key} ${past}.`);
    }
    if (what === "resolve") return change(key, "resolve", { kind: button.dataset.kind }, `Lesson ${key} is told as ${button.dataset.kind} from now on.`);
    if (what === "scope") {
      const everywhere = button.dataset.scope === "global";
      return change(key, "scope", { scope: button.dataset.scope }, `Lesson ${key} is told ${everywhere ? "in every project" : "in its own project only"}.`);
    }
    if (what === "delete") {
      if (!confirm(`Delete lesson ${key}? It is never listed or told again; its ratings stay.`)) return;
      await call("POST", `/api/lessons/${encodeURIComponent(key)}/delete`, {});
      say(`Lesson ${key} deleted.`);
      return redraw();
    }
  }

  listBox.addEventListener("click", (event) => {
    const button = event.target.closest("[data-act]");
    if (button) { act(button).catch(() => {}); return; }
    const words = event.target.closest(".words");
    if (words && !words.querySelector("input")) { edit(words.closest(".lesson")); return; }
    const card = event.target.closest(".lesson");
    if (card && !event.target.closest("details, input")) focusCard(card);
  });

  // -- the turns behind a lesson -------------------------------------------------------
  function turnItem(t) {
    const kind = t.value > 0 ? "good" : "bad";
    const label = t.score ? `${t.score}/5` : kind;
    return el("li", {},
      el("span", { class: `badge ${kind}` }, label), " ",
      el("span", { class: "muted" }, `${day(t.rated_at)} · ${t.agent} · `),
      el("a", { href: `/ratings?turn=${encodeURIComponent(t.turn)}`, title: "Open this turn in the ratings browser" }, `turn ${t.turn}`), " ",
      t.comment ? el("q", {}, t.comment) : el("span", { class: "muted" }, t.tags.length ? `tagged ${t.tags.join(", ")}` : ""),
      t.prompt ? [el("br"), el("span", { class: "prompt small" }, `asked: ${t.prompt}`)] : null);
  }
  listBox.addEventListener("toggle", async (event) => {
    const details = event.target;
    if (!details.matches || !details.matches("details[data-turns]") || !details.open || details.dataset.loaded) return;
    const list = details.querySelector(".turns-behind");
    try {
      const turns = await call("GET", `/api/lessons/${encodeURIComponent(details.dataset.turns)}/turns`);
      list.textContent = "";
      turns.forEach((t) => list.append(turnItem(t)));
      details.dataset.loaded = "1";
    } catch (err) { list.textContent = err.message; }
  }, true);

  // -- adding --------------------------------------------------------------------------
  const form = document.getElementById("add-lesson");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = form.elements.text.value.trim();
    if (!text) { say("Write the lesson first.", "error"); return; }
    const folder = form.elements.folder.value || null;
    const added = await call("POST", "/api/lessons", { text, folder, kind: form.elements.kind.value }).catch(() => null);
    if (!added) return;
    form.elements.text.value = "";
    say(`Added lesson ${added.id} for ${folder || "every project"}.`);
    await redraw(added.id);
  });

  // -- the preview ---------------------------------------------------------------------
  const budget = document.getElementById("budget");
  let latest = 0;  // answers can arrive out of order: only the newest question's is shown
  async function loadPreview() {
    const mine = ++latest;
    const agent = document.getElementById("preview-agent").value;
    const folder = document.getElementById("preview-folder").value;
    const query = new URLSearchParams({ agent });
    if (folder) query.set("folder", folder);
    let shown;
    try { shown = await call("GET", `/api/lessons/preview?${query}`); } catch (err) { return; }
    if (mine !== latest) return;
    const bar = budget.querySelector(".budget-bar");
    bar.querySelector(".fill").style.width = `${Math.min(100, (100 * shown.chars) / shown.cap)}%`;
    bar.querySelector(".mark").style.left = `${(100 * shown.budget) / shown.cap}%`;
    bar.classList.toggle("over", shown.chars > shown.budget);
    bar.setAttribute("aria-valuenow", shown.chars);
    document.getElementById("budget-words").textContent =
      `${num(shown.chars)} of ${num(shown.budget)} characters · ${shown.lessons} lesson${shown.lessons === 1 ? "" : "s"} · the hook cuts at ${num(shown.cap)}`;
    const where = document.getElementById("preview-where");
    where.textContent = shown.where;
    where.className = "small " + (shown.on ? "ok" : "muted");
    const text = document.getElementById("preview-text");
    text.textContent = shown.text || "";
    text.hidden = !shown.text;
  }
  document.getElementById("preview-agent").addEventListener("change", loadPreview);
  document.getElementById("preview-folder").addEventListener("change", loadPreview);
  document.addEventListener("rltray:lessons-switched", loadPreview);

  // -- keyboard ------------------------------------------------------------------------
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, textarea, select, button, summary") || event.ctrlKey || event.metaKey || event.altKey) return;
    const list = cards();
    if (!list.length) return;
    const index = current ? list.indexOf(current) : -1;
    const key = event.key;
    if (key === "j") focusCard(list[Math.min(list.length - 1, index + 1)]);
    else if (key === "k") focusCard(list[Math.max(0, index - 1)]);
    else if ((key === "e" || key === "Enter") && current) edit(current);
    else if ((key === "m" || key === "p") && current) {
      const button = current.querySelector(`[data-act="${key === "m" ? "mute" : "pin"}"]`);
      act(button).catch(() => {});
    } else return;
    event.preventDefault();
  });

  loadPreview();
})();
