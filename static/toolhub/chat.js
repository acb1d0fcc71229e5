// The chat. The page arrives rendered from the event log up to its last seq; the socket
// resumes from there, and every event frame carries the items it changed, rendered by the
// server's partials (templates/sessions_app/_transcript.html), which replace the old ones
// by id. So a card's state (approval, question, result) is the log's, in every tab and
// after every reload: nothing here decides it. The one thing drawn locally is the text of
// a streaming answer, appended delta by delta as text (never as HTML).

import { attachments } from "./attach.js";

const root = document.querySelector("[data-session]");
const list = root.querySelector(".transcript");
const pane = root.querySelector("[data-pane]");
const form = root.querySelector(".composer");
const input = form.querySelector("textarea");
const sendButton = form.querySelector("[data-send]");
const stopButton = form.querySelector("[data-stop]");
const runningNote = form.querySelector("[data-running-note]");
const questionNote = form.querySelector("[data-question-note]");
const composerError = form.querySelector("[data-composer-error]");
const STILL_ANSWERING = "The assistant is still answering: your message stays here until it is done, or press Stop.";
const jump = root.querySelector("[data-jump]");
const connection = root.querySelector(".connection");
const announce = root.querySelector("[data-announce]");
const demoBanner = root.querySelector(".demo-banner");
const TEXT_LIMIT = Number(root.dataset.textLimit);
const FRAME_LIMIT = Number(root.dataset.frameLimit);

let socket = null;
let lastSeq = Number(root.dataset.lastSeq);
let running = root.hasAttribute("data-running");
let retry = 0;
let firstSocket = true;
let reconnectRefresh = null;
let unconfirmed = ""; // sent text the server has not stored yet
const numbers = new Intl.NumberFormat();

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// --- scrolling: follow the latest unless the person scrolled up -----------------------

function nearBottom() {
  return pane.scrollHeight - pane.scrollTop - pane.clientHeight < 80;
}

function toLatest() {
  pane.scrollTop = pane.scrollHeight;
  jump.hidden = true;
}

// Scrolled up, the way back is one click; at the bottom it goes.
pane.addEventListener("scroll", () => {
  jump.hidden = nearBottom();
});
jump.addEventListener("click", () => {
  toLatest();
  input.focus();
});

function changed(follow) {
  if (follow) toLatest();
  else jump.hidden = false;
}

// --- items -------------------------------------------------------------------------

function fromHtml(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content.firstElementChild;
}

function place(id, html) {
  const old = document.getElementById(id);
  if (!html) {
    // Removed from the conversation (an edit or a regenerate went back before it).
    old?.remove();
    return null;
  }
  const next = fromHtml(html);
  if (!old) {
    list.append(next);
    localTimes(next);
    return next;
  }
  // A card is drawn open or folded as the server says for its state (open while it runs
  // or waits for the person, folded once done), unless the person opened or folded it:
  // theirs is kept. A live tail stays until the result replaces it.
  const oldCard = old.querySelector(".tool-card");
  const newCard = next.querySelector(".tool-card");
  if (oldCard && newCard) {
    if (oldCard.dataset.personSet !== undefined) {
      newCard.open = oldCard.open;
      newCard.dataset.personSet = "";
    }
    const oldTail = oldCard.querySelector("pre.tail");
    const newTail = newCard.querySelector("pre.tail");
    if (oldTail && newTail && oldTail.textContent) {
      newTail.textContent = oldTail.textContent;
      newTail.hidden = false;
    }
  }
  old.replaceWith(next);
  localTimes(next);
  return next;
}

// A card the person used (opened or folded it, answered its approval, question or form:
// a click, which Enter and Space on a control make too) is theirs: it stays as they
// left it, open on what they answered, when the server draws it done.
list.addEventListener("click", (click) => {
  const card = click.target.closest(".tool-card");
  if (card) card.dataset.personSet = "";
});

// Every code block of an answer gets its own Copy button (the answer's HTML is the
// server's; the button is added here, outside it).
function codeButtons(scope) {
  for (const pre of scope.querySelectorAll(".bubble.assistant pre")) {
    if (pre.parentElement.classList.contains("code-block")) continue;
    const wrap = element("div", "code-block");
    pre.replaceWith(wrap);
    const button = element("button", "link small copy-code", "Copy code");
    button.type = "button";
    button.dataset.copyCode = "";
    wrap.append(button, pre);
  }
}

// Times are rendered in the server's zone; the reader's own is nicer. Today's show the
// time only; an earlier day's say which day too (the year only when it is another).
const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const dated = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const yeared = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const full = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "short" });
function when(at) {
  const now = new Date();
  if (at.toDateString() === now.toDateString()) return clock.format(at);
  return (at.getFullYear() === now.getFullYear() ? dated : yeared).format(at);
}
function localTimes(scope) {
  codeButtons(scope);
  for (const time of scope.querySelectorAll("time[datetime]")) {
    const at = new Date(time.dateTime);
    if (Number.isNaN(at.getTime())) continue;
    time.textContent = when(at);
    time.title = full.format(at);
  }
}

function setRunning(value) {
  running = value;
  if (!value && composerError.textContent === STILL_ANSWERING) {
    composerError.hidden = true;
    composerError.textContent = "";
  }
  root.classList.toggle("running", value);
  stopButton.hidden = !value;
  runningNote.hidden = !value;
  sendButton.textContent = value ? "Send answer" : "Send";
  syncQuestion();
}

// While the model waits for an answer, the composer says its next message answers it.
function syncQuestion() {
  const waiting = list.querySelector('.tool-card[data-asking="waiting"]');
  questionNote.hidden = !waiting;
  sendButton.hidden = running && !waiting;
  input.placeholder = waiting
    ? "Your answer to the model's question"
    : "Message (Enter sends)";
}

// A first message names the chat: the header, the list and the window say so at once.
function showTitle(title) {
  const heading = root.querySelector("#chat-title");
  if (heading.textContent === title) return;
  heading.textContent = title;
  heading.title = title;
  document.title = `${title} · Chat · toolhub`;
  const current = root.querySelector('#chats a[aria-current="page"]');
  if (current) {
    current.textContent = title;
    current.title = title;
  }
}

// How full the model's context window was at the last call, from the turn's end.
const gaugeBox = form.querySelector("[data-gauge]");
function gauge(usage) {
  if (!usage || !Number(usage.dataset.window) || !Number(usage.dataset.context)) return;
  const used = Number(usage.dataset.context);
  const size = Number(usage.dataset.window);
  const meter = gaugeBox.querySelector("meter");
  meter.max = size;
  meter.value = used;
  const assumed = usage.hasAttribute("data-assumed");
  const words = gaugeBox.querySelector("[data-gauge-text]");
  words.textContent =
    `${numbers.format(used)} of ${numbers.format(size)} tokens (${Math.min(100, Math.round((used * 100) / size))}%)` +
    (assumed ? ", window assumed" : "");
  // Why "assumed": the model's server does not say, and the agent sets no window.
  words.title = assumed
    ? "The model's server does not say how large its window is, and the agent sets none: this figure is assumed."
    : "";
  gaugeBox.hidden = false;
}

function notice(text) {
  const item = element("li", "item notice-item");
  const line = element("p", "error", text);
  line.setAttribute("role", "alert");
  item.append(line);
  list.append(item);
  changed(true);
}

function draw(frame) {
  if (frame.type === "tail") {
    // The last card with that call id: providers reuse ids, and only the latest runs.
    const tails = list.querySelectorAll(
      `.tool-card[data-call="${CSS.escape(frame.call_id)}"] pre.tail`,
    );
    const tail = tails[tails.length - 1];
    if (!tail) return;
    const follow = nearBottom();
    tail.hidden = false;
    tail.textContent = frame.tail;
    if (follow) toLatest();
    return;
  }
  if (frame.type === "options_changed") {
    // Another tab changed this chat's options: draw them as stored.
    if (frame.tab !== TAB) refreshOptions();
    return;
  }
  if (frame.type === "catalog_changed") {
    // Every open chat hears it at once: spread their requests over a second and a half.
    refreshInspector(300 + Math.random() * 1500);
    return;
  }
  if (frame.type === "error") {
    if (frame.code === "too_many_sockets") {
      // Said where the connection's state is, once, not as a new notice per retry.
      connection.hidden = false;
      connection.textContent = frame.message;
      return;
    }
    if (frame.ref === "elicit" && showFormError(frame.message)) return;
    notice(frame.message);
    if (frame.ref === "chat") {
      // What was typed is not lost to a refusal,
      if (unconfirmed && !input.value) input.value = unconfirmed;
      unconfirmed = "";
      // nor the files it carried: they wait in the composer again.
      attached.refused();
    } else if (frame.ref === "edit" && editSent) {
      // An edit refused (a turn began meanwhile) opens again with what was written.
      reopenEdit(editSent);
      editSent = null;
    }
    // Stop on a turn the server no longer runs (it stopped while the page was away).
    if (frame.code === "no_turn") setRunning(false);
    return;
  }
  if (frame.type !== "event" || frame.seq <= lastSeq) return;
  lastSeq = frame.seq;
  heard?.push(frame);
  // The chat has begun: the starters make way for it.
  root.querySelector("[data-starters]")?.remove();
  const follow = nearBottom();
  if (frame.kind === "rewind") {
    editSent = null;
    dropAfter(frame.data.to);
    // The new version's switcher ("2/2") is drawn with the chat once the turn ends.
    rewound = true;
  }
  if (frame.kind === "branch") redrawTranscript();
  const placed = (frame.items ?? []).map(([id, html]) => place(id, html)).filter(Boolean);
  const data = frame.data;
  switch (frame.kind) {
    case "user_message":
      unconfirmed = "";
      attached.stored();
      changed(true);
      return;
    case "question_answered":
      // The words this page sent as the answer are stored: a later refusal is not theirs.
      unconfirmed = "";
      break;
    case "title":
      showTitle(data.title);
      break;
    case "turn_started":
      setRunning(true);
      demoBanner.hidden = !data.demo;
      if (data.title) showTitle(data.title);
      announce.textContent = "The assistant is answering.";
      break;
    case "text_delta":
      if (!placed.length) {
        const bubbles = list.querySelectorAll("[data-streaming]");
        const bubble = bubbles[bubbles.length - 1];
        if (bubble) bubble.append(data.text);
      }
      break;
    case "elicitation_request":
      announce.textContent = `MCP server ${data.server} asks you to fill in a form.`;
      placed[0]?.scrollIntoView({ block: "nearest" });
      break;
    case "sampling_request":
      announce.textContent = `MCP server ${data.server} asks to use the model.`;
      placed[0]?.scrollIntoView({ block: "nearest" });
      break;
    case "approval_request":
      // Said, and shown, but focus stays where the person is: an Enter meant for the
      // message box must never allow a command.
      announce.textContent = `${data.name} needs your approval.`;
      placed[0]?.scrollIntoView({ block: "nearest" });
      break;
    case "approval_answered":
      // "Allow for this chat" is listed in the inspector, with its Revoke.
      if (data.scope === "chat") refreshInspector(0);
      break;
    case "turn_finished":
    case "turn_failed":
      setRunning(false);
      if (rewound) redrawTranscript();
      rewound = false;
      gauge(placed.map((item) => item.querySelector(".usage")).find(Boolean));
      refreshInspector();
      announce.textContent =
        frame.kind === "turn_failed"
          ? "The answer failed."
          : data.reason === "cancelled"
            ? "Stopped."
            : "The answer is complete.";
      break;
    default:
      break;
  }
  syncQuestion();
  changed(follow);
}

// The inspector shows what the next turn will send with the composer as it is set now:
// refreshed when the composer changes, when a turn ends, and when an operator's disable
// or an MCP change lands (a catalog_changed frame); bursts coalesce into one request.
const inspector = root.querySelector("#inspector");
let inspectorTimer = null;
function refreshInspector(delay = 150) {
  clearTimeout(inspectorTimer);
  inspectorTimer = setTimeout(() => {
    const draft = encodeURIComponent(JSON.stringify(composerIntent()));
    htmx.ajax("GET", `${inspector.dataset.inspectorUrl}?draft=${draft}`, {
      target: inspector,
      swap: "innerHTML",
    });
  }, delay);
}

// Frames sent while the socket is (re)connecting wait here and go out right after the
// resume, in order: a message typed before the page connected is not lost.
const outbox = [];
// The frames sent on this socket before the server said a word on it. A socket the server
// refuses as it connects (too many connections, Redis out of reach) is closed with one of
// REFUSED before it reads any frame: those wait in the outbox again for the next socket.
let unheard = [];
const REFUSED = [4401, 4404, 4429, 4503];

function send(frame) {
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify(frame));
    if (frame.type !== "resume") unheard?.push(frame);
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
    unheard = [];
    send({ type: "resume", after_seq: lastSeq, render: true });
    for (const frame of outbox.splice(0)) send(frame);
    // News that the tools on offer changed is not kept for a page that was away: any
    // socket after the page's first asks for its inspector once it stayed open a moment
    // (spread, as every page reconnects at once; one closed at once, as when Redis is
    // out of reach, does not ask).
    if (!firstSocket) {
      reconnectRefresh = setTimeout(() => {
        refreshInspector(0);
        // News of another tab's choices may have come while this one was away.
        refreshOptions();
      }, 300 + Math.random() * 1500);
    }
    firstSocket = false;
  });
  socket.addEventListener("message", (message) => {
    const frame = JSON.parse(message.data);
    // The server took the socket: what it was sent, it reads.
    if (frame.code !== "too_many_sockets") unheard = null;
    draw(frame);
  });
  socket.addEventListener("close", (closed) => {
    firstSocket = false;
    clearTimeout(reconnectRefresh);
    if (REFUSED.includes(closed.code) && unheard) outbox.unshift(...unheard);
    unheard = null;
    if (closed.code === 4401 || closed.code === 4404) {
      connection.hidden = false;
      connection.textContent = "This chat is not available; sign in again or pick another chat.";
      return;
    }
    // Back off: 0.5 s, 1 s, 2 s … up to 10 s, then resume after the last seq seen.
    const delay = Math.min(10000, 500 * 2 ** retry);
    retry += 1;
    connection.hidden = false;
    if (closed.code === 4429) {
      // Over the number of open connections (the server said which): try again slowly,
      // as tabs close.
      setTimeout(connect, 10000);
      return;
    }
    connection.textContent = "Reconnecting…";
    setTimeout(connect, delay);
  });
}

// Every item of the conversation after seq ``to`` (ids are a letter and the seq of the
// event that began the item).
function dropAfter(to) {
  for (const item of list.querySelectorAll(".item[id]")) {
    if (Number(item.id.slice(1)) > to) item.remove();
  }
}

// --- versions of a message or an answer (an edit or a regenerate keeps the earlier) ---

let rewound = false;
let redrawing = null;
let heard = null; // the events drawn live while a redraw's page is on its way

// The chat as the server shows it now (the branch its log's tip is on), drawn anew: after
// a switch of versions here or in another tab, and after an edit or a regenerate (the
// switchers' counts change). A redraw asked while one runs follows it.
//
// The page drawn is the chat as of its own last seq, which may be older than events the
// socket drew meanwhile (a turn that began and ended while the page was on its way): those
// are drawn again on it, so a redraw never takes away what was already shown. Events are
// stored before any socket hears of them, so none heard before the request is missing.
async function redrawTranscript() {
  const previous = redrawing;
  redrawing = (async () => {
    await previous;
    heard = [];
    const page = await chatPage();
    const since = heard;
    heard = null;
    const fresh = page?.querySelector(".transcript");
    const upto = Number(page?.querySelector("[data-last-seq]")?.dataset.lastSeq);
    if (!fresh || !Number.isInteger(upto)) return;
    // A message being edited stays in its editor, with what was typed: a redraw landing
    // just after a click on Edit (a turn's end, another tab's switch) wiped it before.
    const editing = [...list.querySelectorAll(".edit-form textarea")].map((area) => ({
      id: area.closest(".item")?.id,
      value: area.value,
      focused: document.activeElement === area,
    }));
    list.replaceChildren(...[...fresh.children].map((item) => document.importNode(item, true)));
    localTimes(list);
    for (const open of editing) {
      const item = open.id && document.getElementById(open.id);
      if (!item || !item.querySelector("template[data-source]")) continue;
      editMessage(item);
      const area = item.querySelector(".edit-form textarea");
      area.value = open.value;
      if (!open.focused) area.blur();
    }
    lastSeq = upto;
    for (const frame of since) draw(frame);
  })();
  return redrawing;
}

// This chat's page as the server draws it now, or null when it could not be had.
async function chatPage() {
  try {
    const response = await fetch(location.pathname, { headers: { Accept: "text/html" } });
    if (!response.ok) return null;
    return new DOMParser().parseFromString(await response.text(), "text/html");
  } catch {
    return null;
  }
}

async function switchVersion(button) {
  const group = button.closest("[data-versions]");
  const body = new FormData();
  body.append("message", group.dataset.versions);
  body.append("version", button.dataset.version);
  for (const each of group.querySelectorAll("button")) each.disabled = true;
  let response;
  try {
    response = await fetch(group.dataset.branchUrl, {
      method: "POST",
      headers: { "X-CSRFToken": csrfToken },
      body,
    });
  } catch {
    notice("The version could not be switched: the server did not answer. Try again.");
  }
  if (!response?.ok) {
    // Nothing changed: the chat stays as drawn (a redraw would wipe the notice, and what
    // the person had open or typed on its cards), with its switcher usable again.
    if (response) notice((await response.text()) || "The version could not be switched.");
    for (const each of group.querySelectorAll("button")) each.disabled = !each.dataset.version;
    return;
  }
  await redrawTranscript();
  announce.textContent = "Showing another version.";
}

// --- what the person does in the transcript ------------------------------------------

function editMessage(item) {
  if (item.querySelector(".edit-form")) return;
  const source = item.querySelector("template[data-source]").content.textContent;
  const editor = element("form", "edit-form");
  const label = element("label", "visually-hidden", "Edit your message");
  const area = element("textarea");
  area.id = `edit-${item.id}`;
  label.htmlFor = area.id;
  area.rows = Math.min(12, source.split("\n").length + 1);
  area.value = source;
  const actions = element("div", "actions");
  const cancel = element("button", "secondary", "Cancel");
  cancel.type = "button";
  const save = element("button", "", "Send");
  save.type = "submit";
  actions.append(cancel, save);
  editor.append(label, area, actions);
  const bubble = item.querySelector(".bubble");
  bubble.hidden = true;
  item.insertBefore(editor, bubble.nextSibling);
  area.focus();
  const close = () => {
    editor.remove();
    bubble.hidden = false;
  };
  cancel.addEventListener("click", close);
  area.addEventListener("keydown", (key) => {
    if (key.key === "Escape") {
      key.stopPropagation();
      close();
    } else if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
      key.preventDefault();
      editor.requestSubmit();
    }
  });
  editor.addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    const text = area.value.trim();
    if (!text) return;
    const frame = { type: "edit", seq: Number(item.id.slice(1)), text, intent: composerIntent() };
    const problem = tooLong(text, frame);
    if (problem) {
      notice(problem);
      return;
    }
    send(frame);
    editSent = { id: item.id, text: area.value };
    close();
    input.focus();
  });
}

// The edit sent last, until the server stores it (its rewind) or refuses it.
let editSent = null;
function reopenEdit({ id, text }) {
  const item = document.getElementById(id);
  if (!item?.querySelector("template[data-source]")) return;
  editMessage(item);
  item.querySelector(".edit-form textarea").value = text;
}

// One of the question's options, picked on its card.
function answer(text) {
  answering();
  send({ type: "chat", text, answer: true });
  input.focus();
}

// The question answered (on its card or from the composer): its card is the person's.
function answering() {
  const asking = list.querySelector('.tool-card[data-asking="waiting"]');
  if (asking) asking.dataset.personSet = "";
}

list.addEventListener("click", async (clicked) => {
  const target = clicked.target.closest("button");
  if (!target) return;
  const card = target.closest(".tool-card");
  if (target.dataset.approve && card) {
    send({
      type: "approve",
      call_id: card.dataset.call,
      allow: target.dataset.approve === "allow",
      scope: target.dataset.scope || "once",
      // The tool's own approval, or an MCP server's request for the model during it.
      kind: target.dataset.kind || "approval",
    });
    // Until the answer is stored and comes back for every tab, nothing is clicked twice.
    for (const button of card.querySelectorAll("[data-approve]")) button.disabled = true;
    input.focus();
  } else if (target.dataset.elicit && card) {
    // Decline, "Not now", or "I opened it" for a page to open: nothing to fill in.
    sendElicit(card, target.dataset.elicit, null);
  } else if (target.dataset.answer !== undefined && card) {
    for (const button of card.querySelectorAll("button")) button.disabled = true;
    answer(target.dataset.answer);
  } else if (target.hasAttribute("data-edit")) {
    editMessage(target.closest(".item"));
  } else if (target.dataset.version) {
    switchVersion(target);
  } else if (target.hasAttribute("data-regenerate")) {
    send({ type: "regenerate", intent: composerIntent() });
    input.focus();
  } else if (target.hasAttribute("data-copy") || target.hasAttribute("data-copy-code")) {
    try {
      if (target.hasAttribute("data-copy-code")) {
        await navigator.clipboard.writeText(target.parentElement.querySelector("pre").textContent);
      } else {
        await copyMessage(target.closest(".item").querySelector(".bubble"));
      }
      target.textContent = "Copied";
    } catch {
      target.textContent = "Copy failed";
    }
    const label = target.hasAttribute("data-copy-code") ? "Copy code" : "Copy";
    setTimeout(() => {
      target.textContent = label;
    }, 1500);
  }
});

// A message is copied as it reads, not as its markdown source: the text as shown for a
// plain editor, and the rendered HTML for one that keeps formatting (a document, a mail).
// The code blocks' own Copy code buttons are not part of the message.
async function copyMessage(bubble) {
  const shown = bubble.cloneNode(true);
  for (const button of shown.querySelectorAll("button")) button.remove();
  // innerText follows the layout (a paragraph, a list item: a line each); the clone is
  // measured in place, unseen, since a detached node has no layout.
  shown.classList.add("copy-measure");
  bubble.after(shown);
  const text = shown.innerText.trim();
  shown.remove();
  const html = shown.innerHTML;
  if (typeof ClipboardItem === "undefined") return navigator.clipboard.writeText(text);
  return navigator.clipboard.write([
    new ClipboardItem({
      "text/plain": new Blob([text], { type: "text/plain" }),
      "text/html": new Blob([html], { type: "text/html" }),
    }),
  ]);
}

// An MCP server's form: each field is sent as its kind reads it (a checkbox as true or
// false, several choices as a list, the rest as typed); the server checks it against the
// form and a refusal comes back as an error frame shown on the card.
function formContent(form) {
  const content = {};
  for (const element of form.querySelectorAll("[data-kind]")) {
    if (element.dataset.kind === "boolean") {
      content[element.name] = element.checked;
    } else if (element.dataset.kind === "choices") {
      const picked = element.querySelectorAll("input:checked");
      content[element.dataset.name] = Array.from(picked, (box) => box.value);
    } else if (element.value !== "") {
      content[element.name] = element.value;
    }
  }
  return content;
}

function sendElicit(card, action, content) {
  send({ type: "elicit", call_id: card.dataset.call, action, content });
  // Until the answer is stored and comes back for every tab, nothing is sent twice.
  for (const button of card.querySelectorAll(".elicitation button")) button.disabled = true;
  const error = card.querySelector("[data-elicit-error]");
  if (error) error.hidden = true;
}

function showFormError(message) {
  const error = list.querySelector(".tool-card [data-elicit-error]");
  if (!error) return false;
  error.textContent = message;
  error.hidden = false;
  for (const button of error.closest(".elicitation").querySelectorAll("button")) {
    button.disabled = false;
  }
  return true;
}

list.addEventListener("submit", (submitted) => {
  const elicitForm = submitted.target.closest("[data-elicit-form]");
  if (elicitForm) {
    submitted.preventDefault();
    sendElicit(elicitForm.closest(".tool-card"), "accept", formContent(elicitForm));
    return;
  }
  const answerForm = submitted.target.closest("[data-answer-form]");
  if (!answerForm) return;
  submitted.preventDefault();
  const text = answerForm.elements.answer.value.trim();
  if (!text) return;
  for (const button of answerForm.querySelectorAll("button")) button.disabled = true;
  answer(text);
});

// The Tools and Web search controls have three states: "follow" sends null (the chat
// keeps no override; the agent and the profile decide), "on" and "off" override. What
// follow comes to was resolved on the server for every toolset of the Profile select.
const OVERRIDE = { follow: null, on: true, off: false };
let follow = readFollow();
function readFollow() {
  return JSON.parse(document.getElementById("composer-follow").textContent);
}

function updateControls() {
  // The words come from the server's table (sessions_app.composer), computed from the
  // resolver for every combination: the page never guesses what a turn sends.
  const toolsBox = form.querySelector('[data-tristate="tools"]');
  const webBox = form.querySelector('[data-tristate="web_search"]');
  const toolset = form.elements.toolset.value;
  const toolsState = form.elements.tools.value;
  const said = follow.words[toolset]?.[toolsState]?.[form.elements.web_search.value];
  const web = follow.web_search[toolset];
  toolsBox.querySelector("[data-resolved]").textContent = `· ${follow.tools.on ? "on" : "off"}`;
  // "On" cannot take effect when web search is unavailable (not installed, no key, or
  // disabled by an operator): it is not offered, and the words say why.
  form.querySelector("#web-search-on").disabled = Boolean(web?.unavailable);
  if (!said) return;
  toolsBox.querySelector("[data-hint]").textContent = said.tools;
  webBox.querySelector("[data-hint]").textContent = said.web;
  const followOn = follow.words[toolset][toolsState].follow.web_follow_on;
  webBox.querySelector("[data-resolved]").textContent = `· ${followOn ? "on" : "off"}`;
}
updateControls();

function composerIntent() {
  return {
    toolset: form.elements.toolset.value === "default" ? null : form.elements.toolset.value,
    enabled: OVERRIDE[form.elements.tools.value],
    web_search: OVERRIDE[form.elements.web_search.value],
  };
}

function tooLong(text, frame) {
  if (text.length > TEXT_LIMIT) {
    return `That message is too long: ${numbers.format(text.length)} characters, the limit is ${numbers.format(TEXT_LIMIT)}.`;
  }
  const bytes = new TextEncoder().encode(JSON.stringify(frame)).length;
  if (bytes > FRAME_LIMIT) {
    return `That message is too long to send: ${numbers.format(bytes)} bytes, the limit is ${numbers.format(FRAME_LIMIT)}.`;
  }
  return "";
}

// A message sent while the assistant answers (and asks nothing) would be refused: the
// composer says so under the box, keeps the text, and the line goes when the turn ends.
let awaitingChoices = false;
form.addEventListener("submit", async (submitted) => {
  submitted.preventDefault();
  // A choice just made is stored before the message goes, so the turn uses it.
  if (awaitingChoices) return;
  awaitingChoices = true;
  try {
    // Files still uploading go with the message once they are stored.
    await Promise.all([applying, attached.settled()]);
  } finally {
    awaitingChoices = false;
  }
  const text = input.value.trim();
  const files = attached.ids();
  if (!text && !files.length) return;
  if (running && !list.querySelector('.tool-card[data-asking="waiting"]')) {
    composerError.hidden = false;
    composerError.textContent = STILL_ANSWERING;
    return;
  }
  // While a turn runs, a message is the answer to the model's question (the server
  // refuses it otherwise), so it carries no intent.
  if (running && files.length) {
    // An answer to the model's question is words only: files go with a new message.
    composerError.hidden = false;
    composerError.textContent = "Answer the question in words; your files go with your next message.";
    return;
  }
  const frame = { type: "chat", text };
  if (files.length) frame.files = files;
  if (!running) frame.intent = composerIntent();
  else {
    // Refused if the question stopped waiting meanwhile (timed out, stopped): the words
    // come back to the box, and never start a turn of their own.
    frame.answer = true;
    answering();
  }
  const problem = tooLong(text, frame);
  composerError.hidden = !problem;
  composerError.textContent = problem;
  if (problem) return;
  send(frame);
  attached.sent();
  unconfirmed = text;
  input.value = "";
  fitInput(); // back to one row
  input.focus();
});

// The composer's completions from MCP servers, in one list under the message box:
// - "/" at the start lists the servers' prompts (slash commands); a prompt with arguments
//   asks for them in a small form, and what the server fills in is sent as the message;
// - "@" at the start of a word lists their resources; the one picked is read and added to
//   the message, as text the person sees and can edit before sending.
// Typing narrows the list, arrows move, Enter or Tab picks, Escape closes.
const menu = form.querySelector("[data-slash-menu]");
const menuList = menu.querySelector("[role=listbox]");
const slashArgs = menu.querySelector("[data-slash-args]");
const csrfToken = document.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
const attached = attachments({
  root,
  form,
  input,
  csrfToken,
  showError(text) {
    composerError.hidden = false;
    composerError.textContent = text;
  },
});
const sources = {
  prompt: { url: root.dataset.promptsUrl, key: "prompts", items: [], loading: null, label: "Prompts of MCP servers", none: "No MCP server offers prompts." },
  resource: { url: root.dataset.resourcesUrl, key: "resources", items: [], loading: null, label: "Resources of MCP servers", none: "No MCP server offers resources." },
};
let shown = []; // {entry, kind}
let picked = 0;
let fillingPrompt = null;
let trigger = null; // {kind, start, query}: what the caret is completing

// Each opening of the menu asks for its list afresh (a server connected, relisted, was
// disabled or failed to answer since it last opened); the list is kept while the menu
// stays open and the person types on.
async function load(kind) {
  const source = sources[kind];
  source.loading ??= (async () => {
    try {
      const response = await fetch(source.url, { headers: { Accept: "application/json" } });
      return response.ok ? (await response.json())[source.key] : [];
    } catch {
      return [];
    }
  })();
  source.items = await source.loading;
  return source.items;
}

function currentTrigger() {
  const before = input.value.slice(0, input.selectionStart);
  if (/^\/\S*$/.test(input.value) && before === input.value) {
    return { kind: "prompt", start: 0, query: input.value.slice(1).toLowerCase() };
  }
  const mention = /(^|\s)@(\S*)$/.exec(before);
  if (mention) {
    return { kind: "resource", start: before.length - mention[2].length - 1, query: mention[2].toLowerCase() };
  }
  return null;
}

function haystack(kind, entry) {
  return kind === "prompt"
    ? `${entry.server}:${entry.name} ${entry.title}`.toLowerCase()
    : `${entry.server}:${entry.uri} ${entry.name}`.toLowerCase();
}

async function updateMenu() {
  if (fillingPrompt) return;
  const wanted = currentTrigger();
  if (wanted === null) {
    closeMenu();
    return;
  }
  const all = await load(wanted.kind);
  const now = currentTrigger();
  if (fillingPrompt || !now || now.kind !== wanted.kind || now.query !== wanted.query) return;
  trigger = now;
  shown = all.filter((entry) => haystack(now.kind, entry).includes(now.query)).slice(0, 20);
  picked = 0;
  drawMenu();
}

function drawMenu() {
  const kind = trigger.kind;
  const items = shown.map((entry, index) => {
    const item = element("li", index === picked ? "picked" : "");
    item.id = `slash-${index}`;
    item.setAttribute("role", "option");
    item.setAttribute("aria-selected", String(index === picked));
    if (kind === "prompt") {
      item.append(element("code", "", `/${entry.server}:${entry.name}`), " ", element("span", "", entry.title));
      if (entry.description) item.append(element("span", "muted small", ` ${entry.description}`));
    } else {
      item.append(element("span", "", entry.name), " ", element("code", "", `${entry.server}: ${entry.uri}`));
      if (entry.description) item.append(element("span", "muted small", ` ${entry.description}`));
    }
    item.addEventListener("mousedown", (press) => {
      press.preventDefault(); // the focus stays in the composer
      choose(index);
    });
    return item;
  });
  const source = sources[kind];
  if (!items.length) items.push(element("li", "muted small", source.items.length ? "Nothing matches." : source.none));
  menuList.setAttribute("aria-label", source.label);
  menuList.replaceChildren(...items);
  menuList.hidden = false;
  menu.hidden = false;
  input.setAttribute("aria-expanded", "true");
  if (shown.length) input.setAttribute("aria-activedescendant", `slash-${picked}`);
  else input.removeAttribute("aria-activedescendant");
}

function closeMenu() {
  fillingPrompt = null;
  trigger = null;
  for (const source of Object.values(sources)) source.loading = null;
  menu.hidden = true;
  slashArgs.hidden = true;
  slashArgs.replaceChildren();
  input.setAttribute("aria-expanded", "false");
  input.removeAttribute("aria-activedescendant");
}

function choose(index) {
  const entry = shown[index];
  if (trigger.kind === "resource") attachResource(entry, trigger);
  else pickPrompt(entry);
}

async function postJson(url, fields) {
  const body = new FormData();
  for (const [name, value] of Object.entries(fields)) body.set(name, value);
  try {
    const response = await fetch(url, {
      method: "POST",
      body,
      headers: { "X-CSRFToken": csrfToken, Accept: "application/json" },
    });
    const data = await response.json();
    return response.ok && data.text ? data : { error: data.error || "It came back empty." };
  } catch {
    return { error: "The server did not answer." };
  }
}

function showProblem(text) {
  composerError.textContent = text;
  composerError.hidden = !text;
}

async function attachResource(resource, at) {
  closeMenu();
  const typed = input.value;
  const data = await postJson(root.dataset.resourceAttachUrl, { server: resource.server, uri: resource.uri });
  if (data.error) {
    showProblem(data.error);
    return;
  }
  showProblem("");
  // The "@query" typed becomes the resource's text, between what was before and after;
  // if the person changed the words up to it while the server read it, the text goes at
  // the end instead, and nothing they wrote is cut.
  let end = at.start + 1 + at.query.length;
  if (input.value.slice(0, end) !== typed.slice(0, end)) {
    at = { start: input.value.length, query: "" };
    end = at.start;
  }
  const before = input.value.slice(0, at.start);
  const after = input.value.slice(end);
  const joint = before && !before.endsWith("\n") ? "\n" : "";
  input.value = `${before}${joint}${data.text}\n${after}`;
  const caret = input.value.length - after.length;
  input.setSelectionRange(caret, caret);
  input.focus();
}

function pickPrompt(prompt) {
  if (!prompt.arguments.length) {
    fillPrompt(prompt, {});
    return;
  }
  fillingPrompt = prompt;
  menuList.hidden = true;
  input.setAttribute("aria-expanded", "false");
  input.removeAttribute("aria-activedescendant");
  const heading = element("p", "small");
  heading.append(element("code", "", `/${prompt.server}:${prompt.name}`), ` ${prompt.title}`);
  slashArgs.setAttribute("aria-label", `Arguments of ${prompt.title}`);
  const fields = prompt.arguments.map((argument, index) => {
    const label = element("label", "", argument.required ? argument.name : `${argument.name} (optional)`);
    const box = element("textarea");
    box.rows = 2;
    box.id = `slash-arg-${index}`;
    box.dataset.argument = argument.name;
    box.required = argument.required;
    box.placeholder = argument.description;
    label.htmlFor = box.id;
    box.addEventListener("keydown", (key) => {
      if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
        key.preventDefault();
        usePrompt();
      } else if (key.key === "Escape") {
        key.stopPropagation();
        closeMenu();
        input.focus();
      }
    });
    return [label, box];
  });
  const use = element("button", "small", "Use prompt");
  use.type = "button";
  use.addEventListener("click", usePrompt);
  const cancel = element("button", "secondary small", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => {
    closeMenu();
    input.focus();
  });
  // The buttons stay in sight at the foot of the panel, however far its fields scroll.
  const actions = element("div", "slash-actions");
  actions.append(use, cancel);
  slashArgs.replaceChildren(heading, ...fields.flat(), actions);
  slashArgs.hidden = false;
  menu.hidden = false;
  fields[0][1].focus();
}

function usePrompt() {
  const values = {};
  for (const box of slashArgs.querySelectorAll("textarea")) {
    if (box.required && !box.value.trim()) {
      box.focus();
      box.reportValidity();
      return;
    }
    values[box.dataset.argument] = box.value;
  }
  fillPrompt(fillingPrompt, values);
}

let promptFilling = false; // one prompt is filled in at a time: a second Enter waits
async function fillPrompt(prompt, values) {
  if (promptFilling) return;
  promptFilling = true;
  const typed = input.value;
  let data;
  try {
    data = await postJson(root.dataset.promptFillUrl, {
      server: prompt.server,
      name: prompt.name,
      arguments: JSON.stringify(values),
    });
  } finally {
    promptFilling = false;
  }
  if (data.error) {
    showProblem(data.error); // the form stays open, to put it right
    return;
  }
  closeMenu();
  if (input.value !== typed) {
    // The person wrote on while the server filled it in: what they wrote is theirs, and
    // nothing is sent that they did not see.
    showProblem("The prompt was not used: your message changed while it was being filled in. Pick it again to use it.");
    return;
  }
  showProblem("");
  input.value = data.text;
  form.requestSubmit();
}

input.addEventListener("input", updateMenu);

input.addEventListener("keydown", (key) => {
  if (!menu.hidden && !menuList.hidden && !key.isComposing) {
    if (key.key === "ArrowDown" || key.key === "ArrowUp") {
      key.preventDefault();
      if (!shown.length) return;
      const step = key.key === "ArrowDown" ? 1 : -1;
      picked = (picked + step + shown.length) % shown.length;
      drawMenu();
      return;
    }
    if (key.key === "Escape") {
      // Esc closes the menu, and only the menu: not the running turn too.
      key.preventDefault();
      key.stopPropagation();
      closeMenu();
      return;
    }
    if ((key.key === "Enter" || key.key === "Tab") && !key.shiftKey && shown.length) {
      key.preventDefault();
      choose(picked);
      return;
    }
  }
  if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
    key.preventDefault();
    form.requestSubmit();
  }
});
input.addEventListener("input", () => {
  if (!composerError.hidden && input.value.length <= TEXT_LIMIT) composerError.hidden = true;
});

function stop() {
  send({ type: "cancel" });
  input.focus();
}
stopButton.addEventListener("click", stop);

// --- the shell: the chats drawer and the inspector panel ------------------------------

const drawerOpen = root.querySelector("[data-drawer-open]");
function setDrawer(open) {
  root.classList.toggle("drawer-open", open);
  drawerOpen.setAttribute("aria-expanded", String(open));
  if (open) root.querySelector("#chats a, #chats button").focus();
}
drawerOpen.addEventListener("click", () => setDrawer(true));
root.querySelector("[data-drawer-close]").addEventListener("click", () => {
  setDrawer(false);
  drawerOpen.focus();
});

const inspectorToggle = root.querySelector("[data-inspector-toggle]");
const inspectorClose = root.querySelector("[data-inspector-close]");
const INSPECTOR_KEY = "toolhub.inspector";
// Wide: a column, open unless the person closed it (remembered). Narrower: a panel over
// the conversation, closed until asked for, and never remembered open.
const wide = matchMedia("(min-width: 72.01rem)");
function inspectorOpen() {
  return wide.matches
    ? !root.classList.contains("inspector-closed")
    : root.classList.contains("inspector-open");
}
function setInspector(open) {
  if (wide.matches) {
    root.classList.toggle("inspector-closed", !open);
    localStorage.setItem(INSPECTOR_KEY, open ? "open" : "closed");
  } else {
    root.classList.toggle("inspector-open", open);
  }
  inspectorToggle.setAttribute("aria-expanded", String(open));
}
root.classList.toggle("inspector-closed", localStorage.getItem(INSPECTOR_KEY) === "closed");
inspectorToggle.setAttribute("aria-expanded", String(inspectorOpen()));
wide.addEventListener("change", () => {
  root.classList.remove("inspector-open");
  inspectorToggle.setAttribute("aria-expanded", String(inspectorOpen()));
});
inspectorToggle.addEventListener("click", () => setInspector(!inspectorOpen()));
inspectorClose.addEventListener("click", () => {
  setInspector(false);
  inspectorToggle.focus();
});

// The chat's options (agent, profile, Tools, Web search, plan mode) open from one button
// as a panel over the composer; the choices that differ from the default show as chips
// on the row, each opening the panel at its control.
const optionsButton = form.querySelector("[data-options-toggle]");
const optionsPanel = form.querySelector("[data-composer-options]");
const chips = form.querySelector("[data-chips]");
function optionsOpen() {
  return !optionsPanel.hidden;
}
function setOptions(open, focus = null) {
  optionsPanel.hidden = !open;
  optionsButton.setAttribute("aria-expanded", String(open));
  if (open) (focus ?? optionsPanel.querySelector("select, input"))?.focus();
}
optionsButton.addEventListener("click", () => setOptions(!optionsOpen()));
document.addEventListener("click", (click) => {
  if (optionsOpen() && !optionsPanel.contains(click.target) && !optionsButton.contains(click.target) && !chips.contains(click.target)) {
    setOptions(false);
  }
});
function chip(text, control) {
  const item = element("li");
  const button = element("button", "", text);
  button.type = "button";
  button.title = "Change it in the chat's options";
  button.addEventListener("click", () => setOptions(true, control));
  item.append(button);
  return item;
}
function summarizeOptions() {
  const picker = root.querySelector("[data-agent-picker]");
  const items = [];
  if (picker && picker.value !== picker.dataset.default) {
    items.push(chip(`Agent: ${agentPickerName()}`, picker));
  }
  const model = form.elements.model;
  if (model.value) items.push(chip(`Model: ${model.selectedOptions[0]?.textContent ?? ""}`, model));
  const toolset = form.elements.toolset;
  if (toolset.value !== "default") {
    items.push(chip(`Profile: ${toolset.selectedOptions[0]?.textContent ?? toolset.value}`, toolset));
  }
  const tools = form.elements.tools.value;
  if (tools !== "follow") items.push(chip(`Tools ${tools}`, form.querySelector(`#tools-${tools}`)));
  const web = form.elements.web_search.value;
  if (web !== "follow") items.push(chip(`Web search ${web}`, form.querySelector(`#web-search-${web}`)));
  if (form.elements.plan_mode.checked) items.push(chip("Plan mode", form.elements.plan_mode));
  chips.replaceChildren(...items);
}
function agentPickerName() {
  const picker = root.querySelector("[data-agent-picker]");
  return picker?.selectedOptions[0]?.textContent ?? "";
}
// A long list of agents narrows as a name is typed: the first match is shown picked (the
// one chosen stays while it matches), and Enter makes it the chat's agent.
optionsPanel.addEventListener("input", (typed) => {
  const agentFilter = typed.target.closest("[data-agent-filter]");
  if (!agentFilter) return;
  const picker = root.querySelector("[data-agent-picker]");
  const words = agentFilter.value.trim().toLowerCase();
  let first = null;
  for (const option of picker.options) {
    const match = option.textContent.toLowerCase().includes(words);
    option.hidden = !match;
    if (match && first === null) first = option;
  }
  if (picker.selectedOptions[0]?.hidden && first !== null) first.selected = true;
  summarizeOptions();
});
optionsPanel.addEventListener("keydown", (key) => {
  if (key.key !== "Enter" || !key.target.closest("[data-agent-filter]")) return;
  key.preventDefault();
  applyChoice("agent", root.querySelector("[data-agent-picker]").value);
});

// --- choices apply when made -------------------------------------------------------------

// Each choice is stored at once (sessions_app.views.chat_options), and the panel is drawn
// again from the chat as stored, with a line saying what changed: what the controls show
// is what the next message uses, with or without a reload, and the draft is never touched.
// Choices made in a burst (arrow keys through the agents) go out as one request after the
// one in flight; a message sent meanwhile waits for them (the submit handler awaits).
let unsent = {};
let applying = Promise.resolve();
// This page among the chat's tabs: the news of its own choices is not for it.
const TAB = Math.random().toString(36).slice(2);
function applyChoice(name, value) {
  unsent[name] = value;
  applying = applying.then(applyChoices);
  return applying;
}
async function applyChoices() {
  const choices = unsent;
  unsent = {};
  if (Object.keys(choices).length === 0) return;
  let response;
  try {
    response = await fetch(optionsPanel.dataset.optionsUrl, {
      method: "POST",
      headers: { "X-CSRFToken": csrfToken },
      body: new URLSearchParams({ ...choices, tab: TAB }),
    });
  } catch {
    optionsFailed("the server could not be reached; your choice is not saved.");
    return;
  }
  const html = await response.text();
  if (!html.includes('id="composer-follow"')) {
    optionsFailed(response.status === 404 ? "this chat is gone." : `the server answered ${response.status}.`);
    return;
  }
  // A later choice is on its way: its answer draws the panel.
  if (Object.keys(unsent).length === 0) drawOptions(html);
}
// The panel as stored, drawn again unless a choice of this tab is on its way (its own
// answer draws it then).
async function refreshOptions() {
  if (Object.keys(unsent).length) return;
  let response;
  try {
    response = await fetch(optionsPanel.dataset.optionsUrl);
  } catch {
    return;
  }
  const html = await response.text();
  if (response.ok && html.includes('id="composer-follow"') && !Object.keys(unsent).length) {
    drawOptions(html);
  }
}
// The chat's version each panel was drawn from: an answer read before the one drawn (a
// refresh crossing a choice's own answer on the way) would show what is no longer stored,
// and is dropped.
let optionsVersion = panelVersion(optionsPanel);
function panelVersion(panel) {
  return Number(panel.querySelector("[data-options-version]")?.dataset.optionsVersion);
}
function drawOptions(html) {
  const drawn = document.createElement("template");
  drawn.innerHTML = html;
  const version = panelVersion(drawn.content);
  if (version < optionsVersion) return;
  optionsVersion = version;
  const focused = optionsPanel.contains(document.activeElement) ? document.activeElement.id : "";
  optionsPanel.innerHTML = html;
  follow = readFollow();
  updateControls();
  summarizeOptions();
  refreshInspector(0);
  // The panel's lines are new nodes, which a screen reader may not read out: the page's
  // live region says the same.
  const said = optionsPanel.querySelector("[data-options-said]")?.textContent;
  const failed = optionsPanel.querySelector("[data-options-failed]")?.textContent;
  announce.textContent = failed || said || "";
  if (focused) document.getElementById(focused)?.focus();
}
function optionsFailed(why) {
  // What the controls show may not be stored: draw them from the chat as it is.
  const line = optionsPanel.querySelector("[data-options-said]");
  line.textContent = `Not changed: ${why}`;
  line.classList.add("error");
  announce.textContent = line.textContent;
}
optionsPanel.addEventListener("change", (changed) => {
  const control = changed.target;
  if (control.matches("[data-agent-filter]")) return;
  if (control.name === "plan_mode") applyChoice("plan_mode", control.checked ? "on" : "off");
  else if (["agent", "model", "toolset", "tools", "web_search"].includes(control.name)) {
    if (control.name !== "agent") updateControls();
    applyChoice(control.name, control.value);
  }
});
form.addEventListener("change", summarizeOptions);
summarizeOptions();

// The message box grows with what is typed (up to a third of the screen, then scrolls).
function fitInput() {
  input.style.height = "auto";
  input.style.height = `${input.scrollHeight + 2}px`;
}
input.addEventListener("input", fitInput);

// --- keyboard ---------------------------------------------------------------------------

const searchDialog = document.getElementById("search");
const searchInput = document.getElementById("search-query");
const shortcuts = document.getElementById("shortcuts");
function openSearch() {
  if (!searchDialog.open) searchDialog.showModal();
  searchInput.select();
  if (!searchInput.value) htmx.trigger(searchInput, "search");
}
root.querySelector("[data-search-open]").addEventListener("click", openSearch);

// The Files panel lists the workspace afresh each time it opens: the agent may have
// written since. A refused preview (a path refused, a file gone) is shown in its place,
// not dropped as htmx drops an error's body.
const filesDialog = document.getElementById("files");
function openFiles() {
  if (!filesDialog.open) filesDialog.showModal();
  return htmx.ajax("GET", filesDialog.dataset.filesUrl, { target: "#files-body", swap: "innerHTML" });
}
root.querySelector("[data-files-open]").addEventListener("click", openFiles);
// A write or edit card's "Preview in Files": the panel, then that file's preview.
root.addEventListener("click", (event) => {
  const button = event.target.closest("[data-files-preview]");
  if (!button) return;
  const url = `${filesDialog.dataset.previewUrl}?path=${encodeURIComponent(button.dataset.filesPreview)}`;
  openFiles().then(() => htmx.ajax("GET", url, { target: "#files-preview", swap: "innerHTML" }));
});
filesDialog.addEventListener("htmx:beforeSwap", (event) => {
  if (event.detail.target.id === "files-preview" && event.detail.xhr.status < 500) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

function typing(target) {
  return target.closest("input, textarea, select, [contenteditable]") !== null;
}

document.addEventListener("keydown", (key) => {
  if ((key.ctrlKey || key.metaKey) && key.key.toLowerCase() === "k") {
    key.preventDefault();
    openSearch();
    return;
  }
  if (key.key === "?" && !typing(key.target) && !searchDialog.open) {
    key.preventDefault();
    if (!shortcuts.open) shortcuts.showModal();
    return;
  }
  // An open dialog closes itself on Esc.
  if (searchDialog.open || shortcuts.open || filesDialog.open) return;
  if (key.key === "Escape") {
    if (optionsOpen()) {
      setOptions(false);
      optionsButton.focus();
    } else if (root.classList.contains("drawer-open")) {
      setDrawer(false);
      drawerOpen.focus();
    } else if (!wide.matches && inspectorOpen()) {
      setInspector(false);
      inspectorToggle.focus();
    } else if (running) {
      key.preventDefault();
      stop();
    }
  }
});

localTimes(list);
setRunning(running);
// A link to one message (a search hit) shows it; otherwise the latest.
const linked = location.hash.length > 1 ? document.getElementById(location.hash.slice(1)) : null;
if (linked && list.contains(linked)) {
  linked.classList.add("linked");
  linked.scrollIntoView({ block: "center" });
} else {
  toLatest();
}
refreshInspector(0);
connect();
// Ready for the next message, as the page opens.
if (!linked) input.focus();

// The title is renamed in place: its form takes the heading's place, Enter saves (the
// page loads again with the new title everywhere), Esc puts the heading back.
const titleEdit = root.querySelector("[data-title-edit]");
const titleForm = document.getElementById("title-inline");
function editTitle(open) {
  root.querySelector("#chat-title").hidden = open;
  titleEdit.hidden = open;
  titleForm.hidden = !open;
  if (open) titleForm.elements.title.select();
  else titleEdit.focus();
}
titleEdit.addEventListener("click", () => editTitle(true));
titleForm.addEventListener("keydown", (key) => {
  if (key.key !== "Escape") return;
  key.preventDefault();
  key.stopPropagation();
  editTitle(false);
});

// An empty chat's starters send their text as if typed.
root.querySelector("[data-starters]")?.addEventListener("click", (click) => {
  const starter = click.target.closest("[data-starter]");
  if (!starter) return;
  input.value = starter.dataset.starter;
  fitInput();
  form.requestSubmit();
});
