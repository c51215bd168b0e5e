// rltray's native OpenClaw plugin (verified with OpenClaw 2026.9.6; see app/hooks/openclaw.py).
//
// It only hands what OpenClaw tells it to rltray's hook program, the same stdlib-only
// `capture.py` that Claude Code and Codex run, with the payload on stdin: the hook writes
// the spool records (atomic, 0600) and answers `/rl`. No port is opened and no secret is
// kept: the command (interpreter, capture.py, --home, rltray's data folder) comes from this
// plugin's config, written by `rltray hooks install --agent openclaw`, and trust rests on
// the OS user as for the other agents. Every failure is the hook's log line, never the
// gateway's: a handler never throws and never holds a run for longer than TIMEOUT_MS.
import { spawn } from "node:child_process";

const TIMEOUT_MS = 10_000;
const MAX_OUT = 64 * 1024;

function runHook(command, event, payload) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(command[0], [...command.slice(1), `openclaw-${event}`], {
        stdio: ["pipe", "pipe", "ignore"],
        windowsHide: true,
      });
    } catch {
      resolve("");
      return;
    }
    let out = "";
    const timer = setTimeout(() => child.kill(), TIMEOUT_MS);
    child.stdout.on("data", (chunk) => {
      if (out.length < MAX_OUT) out += chunk.toString("utf8");
    });
    child.on("error", () => {
      clearTimeout(timer);
      resolve("");
    });
    child.on("close", () => {
      clearTimeout(timer);
      resolve(out);
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}

function answerOf(out) {
  for (const line of out.split("\n").reverse()) {
    if (!line.trim()) continue;
    try {
      const value = JSON.parse(line);
      if (value && typeof value.text === "string") return value.text;
    } catch {
      // not the answer line
    }
  }
  return "rltray: the hook program gave no answer; run `rltray doctor`.";
}

// The text of the messages after the history's last user or assistant message: what
// OpenClaw adds for this run only (system events such as reactions, runtime context).
function newContext(messages) {
  if (!Array.isArray(messages)) return [];
  const out = [];
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const message = messages[i];
    if (!message || message.role === "user" || message.role === "assistant") break;
    const content = message.content;
    if (typeof content === "string") out.unshift(content);
    else if (Array.isArray(content)) {
      out.unshift(content.map((part) => (typeof part?.text === "string" ? part.text : "")).join("\n"));
    }
  }
  return out;
}

const channelOf = (ctx) => ctx?.channel || ctx?.channelId || ctx?.messageProvider || null;

export default {
  id: "rltray",
  name: "rltray",
  description: "Capture finished runs for rltray and rate them with /rl.",
  register(api) {
    const command = Array.isArray(api.pluginConfig?.command) ? api.pluginConfig.command : null;
    if (!command || command.length === 0 || !command.every((part) => typeof part === "string")) {
      api.logger?.warn?.("rltray: no hook command configured; run `rltray hooks install --agent openclaw`");
      return;
    }

    // The gateway loaded this plugin (not a CLI's discovery pass): `rltray doctor` says when.
    if (api.registrationMode === undefined || api.registrationMode === "full") {
      void runHook(command, "loaded", { version: api.runtime?.version || null });
    }

    // A finished run: its messages, session, channel and model become one turn.
    api.on("agent_end", async (event, ctx) => {
      await runHook(command, "end", {
        session: ctx?.sessionKey || ctx?.sessionId || null,
        run: event?.runId || ctx?.runId || null,
        success: event?.success === true,
        trigger: ctx?.trigger || null,
        channel: channelOf(ctx),
        chat: ctx?.chatId || null,
        sender: ctx?.senderId || null,
        model: ctx?.modelId || null,
        provider: ctx?.modelProviderId || null,
        duration_ms: event?.durationMs ?? null,
        messages: Array.isArray(event?.messages) ? event.messages : [],
      });
    });

    // A delivered reply: its platform message id, so a reaction on it finds its turn.
    api.on("message_sent", async (event, ctx) => {
      if (!event?.success || !event?.messageId) return;
      await runHook(command, "sent", {
        session: event.sessionKey || ctx?.sessionKey || null,
        run: event.runId || ctx?.runId || null,
        message_id: String(event.messageId),
        channel: ctx?.channelId || null,
        to: event.to || null,
      });
    });

    // Reactions reach no hook when they arrive; OpenClaw puts "<Channel> reaction added: 👍
    // ... on msg N" into the sender's next run (2026.9.6: in the runtime-context message
    // after the history, not in the prompt), read here before the model is called. Never
    // blocks the run (this hook fails closed, so it always returns nothing).
    api.on("before_agent_run", async (event, ctx) => {
      const text = [typeof event?.prompt === "string" ? event.prompt : "", ...newContext(event?.messages)]
        .join("\n");
      if (!/reaction added: /.test(text)) return;
      await runHook(command, "react", {
        session: ctx?.sessionKey || ctx?.sessionId || null,
        channel: ctx?.channel || ctx?.messageProvider || null,
        sender: event?.senderId || ctx?.senderId || null,
        prompt: text,
      });
    });

    // `/rl good|bad|undo|status`: answered by the hook, never sent to the model, and only
    // for the owner or allowlisted senders (requireAuth: OpenClaw refuses anyone else).
    api.registerCommand({
      name: "rl",
      description: "Rate the last answer for rltray: good, bad, 1-5, undo, status",
      acceptsArgs: true,
      requireAuth: true,
      handler: async (ctx) => {
        if (!ctx?.isAuthorizedSender) {
          return { text: "rltray: only the owner or an allowlisted sender may rate here." };
        }
        const out = await runHook(command, "rl", {
          session: ctx.sessionKey || ctx.sessionId || null,
          args: typeof ctx.args === "string" ? ctx.args : "",
          sender: ctx.senderId || null,
          channel: ctx.channelId || ctx.channel || null,
        });
        return { text: answerOf(out) };
      },
    });
  },
};
