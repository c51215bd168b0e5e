// Ratings browser: keyboard (j/k move, g/b rate, u unrate, x select, Enter open), the detail
// drawer, per-turn and bulk actions. Every change is a JSON call; the row is redrawn from the answer.
"use strict";
(() => {
  const table = document.getElementById("turns");
  const drawer = document.getElementById("detail");
  const rows = () => (table ? Array.from(table.tBodies[0].rows) : []);
  let current = null;

  function focusRow(row, open = false) {
    if (!row) return;
    rows().forEach((r) => r.classList.toggle("current", r === row));
    current = row;
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
    if (open || !drawer.hidden) openDetail(row.dataset.id);
  }

  // The drawer is redrawn from the server after every change, while the user may be typing in
  // it: a new tag's name and a comment not yet saved survive the redraw, and only the newest
  // of overlapping requests is shown (an older answer arriving last would undo a change).
  // A comment being typed keeps the comment it started from (data-was) through redraws, so
  // saving it can tell the server which one it replaces; `rebase` (after the server said another
  // window changed it) makes the comment now stored the one it replaces.
  let opening = 0;
  async function openDetail(id, { rebase = false } = {}) {
    const mine = ++opening;
    const response = await fetch(`/ratings/turn/${id}`, { credentials: "same-origin" });
    if (!response.ok) { rltray.say(`Turn ${id} could not be opened (HTTP ${response.status}).`, "error"); return false; }
    const html = await response.text();
    if (mine !== opening) return false;
    const typing = drawer.dataset.id === String(id) && !drawer.hidden ? typedIn(drawer) : null;
    drawer.innerHTML = html;
    drawer.hidden = false;
    drawer.dataset.id = id;
    if (typing) typing.restore(drawer, rebase);
    return true;
  }

  function startedFrom(box) { return box.dataset.was !== undefined ? box.dataset.was : box.defaultValue; }

  function typedIn(root) {
    const tag = root.querySelector(".new-tag");
    const comment = root.querySelector("textarea");
    const focused = document.activeElement;
    const saved = {
      tag: tag ? tag.value : "",
      comment: comment && comment.value !== comment.defaultValue ? comment.value : null,
      was: comment ? startedFrom(comment) : "",
      focus: focused === tag ? ".new-tag" : focused === comment ? "textarea" : null,
    };
    return {
      restore(fresh, rebase) {
        const newTag = fresh.querySelector(".new-tag");
        const newComment = fresh.querySelector("textarea");
        if (newTag) newTag.value = saved.tag;
        // what was typed is kept unless it is what is stored now (it was just saved)
        if (newComment && saved.comment !== null && saved.comment !== newComment.defaultValue) {
          newComment.value = saved.comment;
          if (!rebase) newComment.dataset.was = saved.was;
        }
        if (saved.focus) { const el = fresh.querySelector(saved.focus); if (el) el.focus(); }
      },
    };
  }

  // A comment was saved: what the server stored (scrubbed of credentials, trimmed) is what the
  // box starts from now, and what it shows unless more was typed since the save was sent. Else
  // the redraw took the typed words for unsaved ones, put them back with the comment they
  // started from, and the next save was refused as changed in another window.
  function afterSave(id, sent, turn) {
    const box = drawer.dataset.id === String(id) ? drawer.querySelector("[data-comment] textarea") : null;
    if (!box) return;  // the drawer shows another turn now, or none
    const stored = turn.rating && turn.rating.comment ? turn.rating.comment : "";
    if (box.value === sent) {
      box.defaultValue = stored;
      box.value = stored;
      delete box.dataset.was;
    } else {
      box.dataset.was = stored;
    }
  }

  function closeDetail() { drawer.hidden = true; drawer.innerHTML = ""; }

  function rowOf(id) { return rows().find((r) => r.dataset.id === String(id)); }

  function redraw(turn) {
    const row = rowOf(turn.id);
    if (row) {
      const cell = row.querySelector(".rating");
      cell.textContent = "";
      const r = turn.rating;
      cell.append(rltray.el("span", { class: "badge " + (r ? (r.value > 0 ? "good" : "bad") : "") }, r ? label(r) : "—"));
      if (r && r.comment) cell.append(" ", rltray.el("span", { class: "muted", title: r.comment }, "✎"));
      const tags = row.querySelector(".tags");
      tags.textContent = "";
      turn.tags.forEach((t) => tags.append(rltray.el("span", { class: "tag" }, t)));
    }
    if (!drawer.hidden && drawer.dataset.id === String(turn.id)) openDetail(turn.id);
  }

  // a graded rating shows its score ("4/5"); good and bad show as words
  function label(r) { return r.score ? `${r.score}/5` : r.value > 0 ? "good" : "bad"; }

  // A turn's changes (rating, comment, tags) go to the server one after another, each once the
  // one before it was answered: a quick g then b must store b, not whichever request the server
  // finished last. The row and the message follow the newest change's answer only.
  const queues = new Map();
  function change(id, send) {
    const queue = queues.get(id) || { tail: Promise.resolve(), sent: 0 };
    queues.set(id, queue);
    const mine = ++queue.sent;
    const done = queue.tail.catch(() => {}).then(send).then((turn) => {
      const newest = mine === queue.sent;
      if (newest) redraw(turn);
      return { turn, newest };
    });
    queue.tail = done;
    return done;
  }

  async function rate(id, value, score) {
    const body = score ? { score } : { value };
    const { turn, newest } = await change(id, () => rltray.call("POST", `/api/turns/${id}/rating`, body));
    if (newest) rltray.say(value === 0 && !score ? `Turn ${id}: rating withdrawn.` : `Turn ${id} rated ${label(turn.rating)}.`);
  }

  async function remove(ids) {
    if (!confirm(`Delete ${ids.length === 1 ? "this turn" : ids.length + " turns"} for good? It is removed from the database and from every later export and training job.`)) return;
    const result = await rltray.call("POST", "/api/turns/bulk", { ids, action: "delete" });
    ids.forEach((id) => { const row = rowOf(id); if (row) row.remove(); });
    if (ids.includes(Number(drawer.dataset.id))) closeDetail();
    rltray.say(`Deleted ${result.changed} turn${result.changed === 1 ? "" : "s"}.`);
    updateCount();
  }

  // the selection is the ids the checked boxes carry (value), read when an action runs
  function selected() { return rows().filter((r) => r.querySelector(".pick").checked).map((r) => Number(r.querySelector(".pick").value)); }
  function updateCount() {
    const n = selected().length;
    document.getElementById("selected-count").textContent = `${n} selected`;
    const link = document.getElementById("export-link");
    if (!link.dataset.base) link.dataset.base = link.getAttribute("href");
    link.setAttribute("href", n ? "/ratings/export.jsonl?" + selected().map((id) => "id=" + id).join("&") : link.dataset.base);
  }

  document.addEventListener("change", (event) => {
    if (event.target.id === "select-all") {
      rows().forEach((r) => { r.querySelector(".pick").checked = event.target.checked; });
    }
    if (event.target.classList.contains("pick") || event.target.id === "select-all") updateCount();
    const pick = event.target.closest(".tagpick input");
    if (pick) tag(pick.value, pick.checked).catch(() => {});
  });

  // One tag added or removed, not the drawer's whole list: a list drawn before another window
  // tagged the turn would take that tag away again.
  async function tag(name, on) {
    const id = Number(drawer.dataset.id);
    const { newest } = await change(id, () => rltray.call("POST", `/api/turns/${id}/tag`, { name, on }));
    if (newest) rltray.say(on ? `Turn ${id}: tagged ${name}.` : `Turn ${id}: ${name} removed.`);
  }

  // After Back (or a reload) the browser may tick boxes by their place on the page, and the
  // list may have moved meanwhile: a box would select a turn the user never picked.
  window.addEventListener("pageshow", () => {
    document.querySelectorAll(".pick, #select-all").forEach((box) => { box.checked = false; });
    updateCount();
  });

  document.addEventListener("click", async (event) => {
    const t = event.target;
    const bulk = t.closest("[data-bulk]");
    if (bulk) {
      const ids = selected();
      if (!ids.length) { rltray.say("Select turns first (x, or the boxes).", "error"); return; }
      const action = bulk.dataset.bulk;
      if (action === "delete") return remove(ids);
      const body = { ids, action };
      if (action === "tag" || action === "untag") body.tag = document.getElementById("bulk-tag").value;
      const result = await rltray.call("POST", "/api/turns/bulk", body);
      rltray.say(`${action}: ${result.changed} turn${result.changed === 1 ? "" : "s"} changed.`);
      setTimeout(() => location.reload(), 500);
      return;
    }
    if (t.closest("[data-close]")) return closeDetail();
    const id = drawer.dataset.id;
    const rateButton = t.closest("[data-rate]");
    if (rateButton && drawer.contains(rateButton)) return rate(Number(id), Number(rateButton.dataset.rate)).catch(() => {});
    if (t.closest("[data-delete]") && drawer.contains(t)) return remove([Number(id)]);
    if (t.closest("[data-add-tag]")) {
      const input = drawer.querySelector(".new-tag");
      const name = input.value.trim();
      if (name) { input.value = ""; return tag(name, true).catch(() => {}); }
      return;
    }
    const row = t.closest("#turns tbody tr");
    if (row && !t.closest(".pick")) focusRow(row, true);
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("[data-comment]");
    if (!form) return;
    event.preventDefault();
    const id = Number(drawer.dataset.id);
    const box = form.querySelector("textarea");
    const body = { comment: box.value, was: startedFrom(box) };
    try {
      const { turn, newest } = await change(id, () => rltray.call("POST", `/api/turns/${id}/comment`, body));
      afterSave(id, body.comment, turn);
      if (newest) rltray.say(`Turn ${id}: comment saved.`);
    } catch (err) {
      if (!err.data || !err.data.error || err.data.error.code !== "comment_changed") return;
      // another window saved a comment meanwhile: show it; what was typed stays, unsaved
      if (!(await openDetail(id, { rebase: true }))) return;
      const now = drawer.querySelector("textarea");
      const note = rltray.el("p", { class: "muted comment-changed", role: "status" },
        now.defaultValue ? `Saved meanwhile in another window: “${now.defaultValue}”. Save again to replace it with yours.`
          : "Another window removed the comment meanwhile. Save again to keep yours.");
      drawer.querySelector("[data-comment] label").after(note);
      rltray.say(err.message, "error");
    }
  });

  document.addEventListener("keydown", (event) => {
    const t = event.target;
    if (t.closest("input, textarea, select") || t.isContentEditable || event.ctrlKey || event.metaKey || event.altKey) return;
    // Enter and Space on a focused button, link or summary are that control's own
    if ((event.key === "Enter" || event.key === " ") && t.closest("button, a, summary")) return;
    const list = rows();
    if (!list.length) return;
    const index = current ? list.indexOf(current) : -1;
    const key = event.key;
    if (key === "j") focusRow(list[Math.min(list.length - 1, index + 1)]);
    else if (key === "k") focusRow(list[Math.max(0, index - 1)]);
    else if (key === "Enter" && current) focusRow(current, true);
    else if (key === "Escape") closeDetail();
    else if ((key === "g" || key === "b" || key === "u") && current) rate(Number(current.dataset.id), key === "g" ? 1 : key === "b" ? -1 : 0).catch(() => {});
    else if ("12345".includes(key) && key.length === 1 && current) rate(Number(current.dataset.id), null, Number(key)).catch(() => {});
    else if (key === "x" && current) { const box = current.querySelector(".pick"); box.checked = !box.checked; updateCount(); }
    else return;
    event.preventDefault();
  });

  // /ratings?turn=N (the Lessons page's link to a turn behind a lesson): open it at once
  if (table && table.dataset.open) focusRow(rowOf(table.dataset.open), true);
})();
