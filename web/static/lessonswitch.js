// Each agent's lessons switch (the Lessons page and the wizard's agents step): one JSON call
// per change, then the line beside it says what the service now does for that agent.
"use strict";
(() => {
  document.addEventListener("change", async (event) => {
    const box = event.target.closest("[data-lessons-agent]");
    if (!box) return;
    const name = box.dataset.lessonsAgent;
    box.disabled = true;
    try {
      const agent = await rltray.call("POST", `/api/lessons/agents/${encodeURIComponent(name)}`, { on: box.checked });
      box.checked = agent.on;
      const line = box.closest(".lesson-switch").querySelector("[data-lessons-state]");
      line.textContent = agent.state;
      line.className = "small " + (agent.on ? "ok" : "muted");
      rltray.say(`Lessons ${agent.on ? "on" : "off"} for ${agent.display_name}.`);
      document.dispatchEvent(new CustomEvent("rltray:lessons-switched", { detail: agent }));
    } catch (err) {
      box.checked = !box.checked;  // the call said why (rltray.call shows it); keep what is true
    } finally {
      box.disabled = false;
    }
  });
})();
