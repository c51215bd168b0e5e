// Shared by every page: JSON calls that carry the CSRF token, and one place to show messages.
"use strict";
const rltray = (() => {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const flash = document.getElementById("flash");
  let timer = null;

  function say(message, kind = "ok") {
    flash.textContent = message;
    flash.className = "flash " + kind;
    flash.hidden = false;
    clearTimeout(timer);
    timer = setTimeout(() => { flash.hidden = true; }, kind === "error" ? 9000 : 3000);
  }

  function hush() {  // a message belongs to the screen it was said on
    clearTimeout(timer);
    flash.hidden = true;
  }

  async function call(method, url, body) {
    const options = { method, headers: { "X-CSRF-Token": csrf, "Accept": "application/json" }, credentials: "same-origin" };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (err) {
      say("rltray did not answer: is it still running?", "error");
      throw err;
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const message = data && data.error ? data.error.message : `HTTP ${response.status}`;
      say(message, "error");
      const err = new Error(message);
      err.data = data;
      throw err;
    }
    return data;
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  return { call, say, hush, el, csrf };
})();
