// The chat: one socket per session, every event drawn by one function whether it comes
// from the replay after `resume` or live, so a reload, a reconnect and a first load look
// the same. Model text is only ever set as text; the one HTML string used is the
// server-rendered, sanitized markdown of a finished message.

const root = document.querySelector("[data-session]");
const list = root.querySelector(".messages-list");
const form = root.querySelector(".composer");
const input = form.querySelector("textarea");
const stopButton = form.querySelector("[data-stop]");
const connection = root.querySelector(".connection");
const announce = root.querySelector("[data-announce]");
const demoBanner = root.querySelector(".demo-banner");

let socket = null;
let lastSeq = 0;
let running = false;
let retry = 0;
let streaming = null; // the assistant bubble receiving text deltas
let unconfirmed = ""; // sent text the server has not stored yet
const cards = new Map(); // call id -> tool card

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function append(node) {
  const item = element("li");
  item.append(node);
  list.append(item);
  item.scrollIntoView({ block: "end", behavior: "auto" });
  return node;
}

function setRunning(value) {
  running = value;
  stopButton.hidden = !value;
}

function toolCard(data) {
  const card = element("details", "tool-card");
  const summary = element("summary");
  summary.append(element("code", "", data.name));
  if (data.via) summary.append(element("span", "tag", `via ${data.via}`));
  const status = element("span", "status", "running");
  summary.append(status);
  card.append(summary);
  card.append(element("p", "label", "Arguments"));
  card.append(element("pre", "arguments", JSON.stringify(data.arguments ?? {}, null, 2)));
  const tail = element("pre", "tail");
  tail.hidden = true;
  card.append(tail);
  const result = element("pre", "result");
  result.hidden = true;
  card.append(result);
  card.dataset.status = "running";
  cards.set(data.call_id, { card, status, tail, result });
  return append(card);
}

function approval(data) {
  const entry = cards.get(data.call_id) ?? { card: toolCard(data) };
  const box = element("div", "approval");
  box.append(element("p", "", `${data.name} needs your approval to run.`));
  for (const [label, allow] of [["Allow", true], ["Deny", false]]) {
    const button = element("button", allow ? "" : "danger", label);
    button.type = "button";
    button.setAttribute("aria-label", `${label} ${data.name}`);
    button.addEventListener("click", () => {
      send({ type: "approve", call_id: data.call_id, allow });
      box.remove();
      entry.card.querySelector("summary").focus();
    });
    box.append(button);
  }
  entry.card.open = true;
  entry.card.append(box);
  announce.textContent = `${data.name} needs your approval.`;
  box.querySelector("button").focus();
}

function draw(frame) {
  if (frame.type === "tail") {
    const entry = cards.get(frame.call_id);
    if (!entry) return;
    entry.tail.hidden = false;
    entry.tail.textContent = frame.tail;
    return;
  }
  if (frame.type === "error") {
    append(element("p", "error", frame.message)).setAttribute("role", "alert");
    // What was typed is not lost to a refusal.
    if (unconfirmed && !input.value) input.value = unconfirmed;
    unconfirmed = "";
    // Stop on a turn the server no longer runs (it stopped while the page was away).
    if (frame.code === "no_turn") setRunning(false);
    return;
  }
  if (frame.type !== "event" || frame.seq <= lastSeq) return;
  lastSeq = frame.seq;
  const data = frame.data;
  switch (frame.kind) {
    case "user_message":
      unconfirmed = "";
      append(element("div", "bubble user", data.text));
      break;
    case "turn_started":
      setRunning(true);
      demoBanner.hidden = !data.demo;
      announce.textContent = "The assistant is answering.";
      break;
    case "text_delta":
      if (!streaming) streaming = append(element("div", "bubble assistant streaming"));
      streaming.textContent += data.text;
      break;
    case "assistant_message": {
      const bubble = streaming ?? append(element("div", "bubble assistant"));
      bubble.classList.remove("streaming");
      // Rendered and sanitized on the server (markdown-it + nh3).
      bubble.innerHTML = data.html;
      streaming = null;
      break;
    }
    case "tool_call":
      streaming = null;
      toolCard(data);
      break;
    case "approval_request":
      approval(data);
      break;
    case "tool_result": {
      const entry = cards.get(data.call_id);
      if (!entry) break;
      entry.card.dataset.status = data.status;
      const cached = data.cached ? " · cached" : "";
      entry.status.textContent =
        data.elapsed_ms !== undefined
          ? `${data.status}${cached} · ${data.elapsed_ms} ms`
          : `${data.status}${cached}`;
      entry.result.hidden = false;
      entry.result.textContent = data.content;
      for (const box of entry.card.querySelectorAll(".approval")) box.remove();
      break;
    }
    case "turn_finished":
    case "turn_failed":
      setRunning(false);
      refreshInspector();
      streaming = null;
      if (frame.kind === "turn_failed") {
        append(element("p", "error", `The turn failed: ${data.message}`)).setAttribute("role", "alert");
        announce.textContent = "The answer failed.";
      } else {
        announce.textContent = data.reason === "cancelled" ? "Stopped." : "The answer is complete.";
      }
      break;
    default:
      break;
  }
}

// The inspector shows what the next turn will send: refreshed when a turn ends, once for
// a replay of many.
let inspectorTimer = null;
function refreshInspector() {
  clearTimeout(inspectorTimer);
  inspectorTimer = setTimeout(
    () => document.body.dispatchEvent(new CustomEvent("toolhub:turn-end")),
    300,
  );
}

// Frames sent while the socket is (re)connecting wait here and go out right after the
// resume, in order: a message typed before the page connected is not lost.
const outbox = [];

function send(frame) {
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify(frame));
  } else {
    outbox.push(frame);
  }
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}${root.dataset.ws}`);
  socket.addEventListener("open", () => {
    retry = 0;
    connection.hidden = true;
    send({ type: "resume", after_seq: lastSeq });
    for (const frame of outbox.splice(0)) send(frame);
  });
  socket.addEventListener("message", (message) => draw(JSON.parse(message.data)));
  socket.addEventListener("close", (closed) => {
    if (closed.code === 4401 || closed.code === 4404) {
      connection.hidden = false;
      connection.textContent = "This chat is not available; sign in again or pick another chat.";
      return;
    }
    // Back off: 0.5 s, 1 s, 2 s … up to 10 s, then resume after the last seq seen.
    const delay = Math.min(10000, 500 * 2 ** retry);
    retry += 1;
    connection.hidden = false;
    connection.textContent = "Reconnecting…";
    setTimeout(connect, delay);
  });
}

// The Tools and Web search controls have three states: "follow" sends null (the chat
// keeps no override; the agent and the profile decide), "on" and "off" override. What
// follow comes to was resolved on the server for every toolset of the Profile select.
const OVERRIDE = { follow: null, on: true, off: false };
const follow = JSON.parse(document.getElementById("composer-follow").textContent);

function showHint(fieldset, key) {
  for (const hint of fieldset.querySelectorAll("[data-hint]")) {
    hint.hidden = hint.dataset.hint !== key;
  }
}

function updateControls() {
  const toolsBox = form.querySelector('[data-tristate="tools"]');
  const webBox = form.querySelector('[data-tristate="web_search"]');
  const toolsState = form.elements.tools.value;
  const toolsOn = toolsState === "follow" ? follow.tools.on : toolsState === "on";
  toolsBox.querySelector("[data-resolved]").textContent = `· ${follow.tools.on ? "on" : "off"}`;
  showHint(toolsBox, toolsState);

  const web = follow.web_search[form.elements.toolset.value] ?? {
    on: false,
    hint: "",
    unavailable: "",
  };
  const webOn = form.querySelector("#web-search-on");
  // "On" cannot take effect when web search is unavailable (not installed, no key, or
  // disabled by an operator): it is not offered, and the hint says why.
  webOn.disabled = Boolean(web.unavailable);
  webBox.querySelector("[data-resolved]").textContent = `· ${web.on && toolsOn ? "on" : "off"}`;
  webBox.querySelector('[data-hint="follow"]').textContent = web.hint;
  webBox.querySelector('[data-hint="unavailable"]').textContent = `Unavailable: ${web.unavailable}.`;
  // The same rule as the server's first render (sessions_app.views.chat_session).
  const webState = form.elements.web_search.value;
  showHint(webBox, web.unavailable ? "unavailable" : toolsOn ? webState : "no_tools");
}

form.elements.toolset.addEventListener("change", updateControls);
for (const radio of form.querySelectorAll(".tristate input[type=radio]")) {
  radio.addEventListener("change", updateControls);
}
updateControls();

form.addEventListener("submit", (submitted) => {
  submitted.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  // While a turn runs, a message is the answer to the model's question (the server
  // refuses it otherwise), so it carries no intent.
  const frame = { type: "chat", text };
  if (!running) {
    frame.intent = {
      toolset: form.elements.toolset.value === "default" ? null : form.elements.toolset.value,
      enabled: OVERRIDE[form.elements.tools.value],
      web_search: OVERRIDE[form.elements.web_search.value],
    };
  }
  send(frame);
  unconfirmed = text;
  input.value = "";
});

input.addEventListener("keydown", (key) => {
  if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
    key.preventDefault();
    form.requestSubmit();
  }
});

stopButton.addEventListener("click", () => send({ type: "cancel" }));

connect();
