// Adapters page: activate / roll back / delete, each a JSON call, then the page redraws itself.
"use strict";
document.addEventListener("click", async (event) => {
  const activate = event.target.closest("[data-activate]");
  const remove = event.target.closest("[data-delete-version]");
  if (activate) {
    const version = Number(activate.dataset.activate);
    const result = await rltray.call("POST", "/api/rollback", { version });
    const said = result.active === null ? "Now using the base model." : `Now using v${result.active}.`;
    // and what Ollama serves now, or why it does not (a rollback once said nothing of it)
    rltray.say(result.ollama ? `${said} Ollama: ${result.ollama}` : said);
    setTimeout(() => location.reload(), result.ollama ? 2500 : 400);
  } else if (remove) {
    const version = Number(remove.dataset.deleteVersion);
    if (!confirm(`Delete v${version} and its files? This cannot be undone.`)) return;
    await rltray.call("POST", "/api/adapters/delete", { version });
    remove.closest("tr").remove();
    rltray.say(`Deleted v${version}.`);
  }
});
