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

// The runs this gateway started, by chat: Telegram's block streaming (and any reply sent
// outside OpenClaw's outbound queue) reports message_sent with no session and no run, so
// the chat's run fills them in. Only this process's memory, for FILL_MS after the run
// (the last piece of a long answer goes ~10 s after agent_end), and never for rltray's
// own `/rl` answers (marked `reply: "rltray"`, so the hook knows them for no turn's).
const FILL_MS = 10 * 60 * 1000;
const RUNS_KEPT = 1000;
const OWN_REPLY = "rltray:";

// chatKey -> { session, run, at }, one for the gateway process: OpenClaw 2026.9.6 registers
// this plugin more than once (registrationMode "full" and "discovery"), and runs the agent
// hooks on one registration and message_sent on another, so a map of one register() call
// never sees the other's runs; a registered symbol on globalThis is the same for every
// registration, and for every copy of this module the loader may make.
function runsOfProcess() {
  const key = Symbol.for("rltray.openclaw.runs");
  if (!(globalThis[key] instanceof Map)) globalThis[key] = new Map();
  return globalThis[key];
}

function chatKey(channel, chat) {
  const name = String(channel || "").toLowerCase();
  let id = String(chat || "").trim();
  while (name && id.toLowerCase().startsWith(`${name}:`)) id = id.slice(name.length + 1).trim();
  return id ? `${name}:${id}` : null;
}

function rememberRun(runs, ctx, runId) {
  const key = chatKey(channelOf(ctx), ctx?.chatId);
  const session = ctx?.sessionKey || ctx?.sessionId;
  if (!key || !session || !runId) return;
  runs.delete(key);
  runs.set(key, { session, run: runId, at: Date.now() });
  for (const old of runs.keys()) {
    if (runs.size <= RUNS_KEPT) break;
    runs.delete(old);
  }
}

// Who may add a lesson from a chat: the owner only, since a lesson is told to every Claude
// Code and Codex session. OpenClaw 2026.9.6 hands a plugin command `senderIsOwner` only
// when the command requires gateway scopes (which would shut every allowlisted sender out
// of `/rl`), so the owner is the sender its config names: `commands.ownerAllowFrom`, as
// `<channel>:<id>` (Telegram: also `tg:<id>`) or a bare id; a wildcard names nobody.
function isOwner(ctx) {
  if (typeof ctx?.senderIsOwner === "boolean") return ctx.senderIsOwner;
  const sender = String(ctx?.senderId || "").trim().toLowerCase();
  const owners = ctx?.config?.commands?.ownerAllowFrom;
  if (!sender || !Array.isArray(owners)) return false;
  const channel = String(ctx?.channel || ctx?.channelId || "").toLowerCase();
  const prefixes = channel === "telegram" ? ["telegram:", "tg:"] : channel ? [`${channel}:`] : [];
  return owners.some((entry) => {
    const owner = String(entry ?? "").trim().toLowerCase();
    const prefix = prefixes.find((p) => owner.startsWith(p));
    const id = prefix ? owner.slice(prefix.length).trim() : owner;
    return id !== "*" && !id.includes(":") && id === sender;
  });
}

// Opt-in Good/Bad buttons under replies (`rltray hooks install --agent openclaw --reply-buttons
// on`): Telegram only (the channel whose callbacks this was verified with), direct chats only.
// A button's callback data is `rltray:<what>:<session key>`: the hook finds the turn of the
// message the button is on through that session's state. Telegram allows 64 bytes, and
// OpenClaw wraps a presented button's value as `tgcb1:<checksum>:<value>` (12 bytes more);
// a longer session key is left out, and the store then finds the turn by the message id in
// the callback's chat.
const NAMESPACE = "rltray";
const VALUE_MAX = 64 - 12;
const BUTTON_CHANNELS = new Set(["telegram"]);
const LABELS = { good: "👍 Good", bad: "👎 Bad" };

// A group's session key names it (`…:group:…`, `…:channel:…`), and Telegram group chat ids
// are negative: anything else OpenClaw routes as a direct chat. (A channel's hooks name the
// chat `conversationId`, an agent run's `chatId`.)
function isDirect(ctx) {
  const key = String(ctx?.sessionKey || "");
  if (/:(group|channel|supergroup):/.test(key)) return false;
  const chat = String(ctx?.conversationId ?? ctx?.chatId ?? "").trim();
  return !chat.replace(/^(telegram|tg):/i, "").startsWith("-");
}

function callbackValue(action, session) {
  const full = `${NAMESPACE}:${action}:${session}`;
  return Buffer.byteLength(full, "utf8") <= VALUE_MAX ? full : `${NAMESPACE}:${action}`;
}

// The keyboard: one row, the chosen rating marked; pressing it again withdraws the rating.
function ratingButtons(session, chosen) {
  return [["good", "bad"].map((what) => ({
    text: what === chosen ? `✓ ${LABELS[what]}` : LABELS[what],
    callback_data: callbackValue(what === chosen ? "undo" : what, session),
  }))];
}

function withButtons(payload, session) {
  const buttons = ratingButtons(session, null)[0].map((b) => ({
    label: b.text, action: { type: "callback", value: b.callback_data },
  }));
  const presentation = payload?.presentation && Array.isArray(payload.presentation.blocks)
    ? payload.presentation : { blocks: [] };
  return { ...payload, presentation: { ...presentation,
    blocks: [...presentation.blocks, { type: "buttons", buttons }] } };
}

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

    const runs = runsOfProcess(); // see FILL_MS

    // The gateway loaded this plugin (not a CLI's discovery pass): `rltray doctor` says when.
    if (api.registrationMode === undefined || api.registrationMode === "full") {
      void runHook(command, "loaded", { version: api.runtime?.version || null });
    }

    // A finished run: its messages, session, channel and model become one turn.
    api.on("agent_end", async (event, ctx) => {
      rememberRun(runs, ctx, event?.runId || ctx?.runId);
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

    // A delivered reply: its platform message id, so a reaction on it finds its turn. Ids
    // are unique only within a chat (Telegram numbers each chat's from 1): the chat goes too.
    api.on("message_sent", async (event, ctx) => {
      if (!event?.success || !event?.messageId) return;
      const own = typeof event.content === "string" && event.content.startsWith(OWN_REPLY);
      const chat = ctx?.conversationId || event.to || null;
      let session = event.sessionKey || ctx?.sessionKey || null;
      let run = own ? null : event.runId || ctx?.runId || null;
      const known = runs.get(chatKey(ctx?.channelId, chat));
      if (known && Date.now() - known.at < FILL_MS && (!session || session === known.session)) {
        session = session || known.session;
        if (!own && !run) run = known.run;
      }
      await runHook(command, "sent", {
        session,
        run,
        message_id: String(event.messageId),
        channel: ctx?.channelId || null,
        chat,
        to: event.to || null,
        ...(own ? { reply: "rltray" } : {}),
      });
    });

    // Reactions reach no hook when they arrive; OpenClaw puts "System: [<time>] Telegram
    // reaction added: 👍 by … on msg N" into the internal-context block of the session's
    // next run (2026.9.6: the block ends the prompt), read here before the model is called.
    // The hook reads that block only, never what the user typed, and only in a direct chat
    // (`direct`); the run's chat need not be the reaction's (one session for every direct
    // chat), so it is not sent. Never blocks the run (this hook fails closed, so it always
    // returns nothing).
    api.on("before_agent_run", async (event, ctx) => {
      rememberRun(runs, ctx, ctx?.runId);
      const prompt = typeof event?.prompt === "string" ? event.prompt : "";
      const context = newContext(event?.messages);
      if (![prompt, ...context].some((text) => text.includes("reaction added: "))) return;
      await runHook(command, "react", {
        session: ctx?.sessionKey || ctx?.sessionId || null,
        channel: ctx?.channel || ctx?.messageProvider || null,
        direct: isDirect(ctx),
        sender: event?.senderId || ctx?.senderId || null,
        prompt,
        context,
      });
    });

    if (api.pluginConfig?.buttons === true) registerButtons(api, command);

    // `/rl good|bad|undo|status`: answered by the hook, never sent to the model, and only
    // for the owner or allowlisted senders (requireAuth: OpenClaw refuses anyone else). It
    // rates the last answer in the chat it was typed in (`to`: one session can hold every
    // direct chat); `/rl lesson` only for the owner (`isOwner`).
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
          owner: isOwner(ctx),
          channel: ctx.channelId || ctx.channel || null,
          chat: ctx.to || ctx.from || null,
        });
        return { text: answerOf(out) };
      },
    });
  },
};

function registerButtons(api, command) {
  // A final reply in a direct chat gets the two buttons; a tool or block reply, a group, a
  // reply OpenClaw cannot tie to a session, or a channel not verified gets none.
  api.on("reply_payload_sending", async (event, ctx) => {
    const channel = event?.channel || ctx?.channelId;
    const session = event?.sessionKey || ctx?.sessionKey;
    if (!BUTTON_CHANNELS.has(channel) || !session || event?.kind !== "final" || !isDirect(ctx)) {
      return;
    }
    return { payload: withButtons(event.payload, session) };
  });

  // A press: only the owner or an allowlisted sender, only in a direct chat. The rating
  // goes to the turn of the message the button is on, through the hook like `/rl`.
  api.registerInteractiveHandler({
    channel: "telegram",
    namespace: NAMESPACE,
    handler: async (ctx) => {
      const payload = String(ctx?.callback?.payload || "");
      const at = payload.indexOf(":");
      const what = at < 0 ? payload : payload.slice(0, at);
      const session = at < 0 ? "" : payload.slice(at + 1);
      if (!["good", "bad", "undo"].includes(what)) return { handled: true };
      if (ctx.isGroup || !ctx.auth?.isAuthorizedSender) return { handled: true };
      const out = await runHook(command, "button", {
        session: session || `telegram:${ctx.callback.chatId}`,
        what,
        message_id: String(ctx.callback.messageId),
        channel: "telegram",
        chat: ctx.callback.chatId || ctx.conversationId || null, // message ids are per chat
        sender: ctx.senderId || null,
      });
      if (!/^rltray: (rated|withdrew)/.test(answerOf(out))) return { handled: true };
      const rows = ratingButtons(session, what === "undo" ? null : what);
      await ctx.respond.editButtons({ buttons: rows }).catch(() => {});
      return { handled: true };
    },
  });
}
