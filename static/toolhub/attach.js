// Files attached to the next message: by the paperclip, by dropping them on the chat, or
// by pasting them into the message box. Each file uploads on its own as soon as it is
// given (so one refused file leaves the others), into the chat's workspace; its chip shows
// it uploading, then ready with a remove button. The message names the ready ones by id.
// The server checks every bound again; the checks here only save a doomed upload.

export function sizeWords(size) {
  for (const [unit, scale] of [["GB", 1e9], ["MB", 1e6], ["KB", 1e3]]) {
    if (size >= scale) {
      const value = size / scale;
      return `${value >= 10 ? value.toFixed(0) : String(Number(value.toFixed(1)))} ${unit}`;
    }
  }
  return size === 1 ? "1 byte" : `${size} bytes`;
}

export function attachments({ root, form, input, csrfToken, showError }) {
  const chips = form.querySelector("[data-attached]");
  const picker = form.querySelector("[data-attach-input]");
  const button = form.querySelector("[data-attach]");
  const uploading = new Set();
  const away = []; // chips of a message sent and not yet stored

  function entries() {
    return [...chips.querySelectorAll(".file-chip")];
  }

  function changed() {
    // A message may be only its files.
    input.required = !entries().some((chip) => chip.dataset.fileId);
  }

  function chip(name, size) {
    const item = document.createElement("li");
    item.className = "file-chip";
    item.dataset.size = String(size);
    const label = document.createElement("span");
    label.className = "file-name";
    label.textContent = name;
    const note = document.createElement("span");
    note.className = "muted small";
    note.textContent = `${sizeWords(size)} · uploading…`;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "link small";
    remove.dataset.fileRemove = "";
    remove.setAttribute("aria-label", `Remove ${name}`);
    remove.textContent = "×";
    remove.hidden = true;
    item.append(label, " ", note, remove);
    chips.append(item);
    return item;
  }

  async function upload(file) {
    const held = entries();
    const bytes = held.reduce((sum, entry) => sum + Number(entry.dataset.size || 0), 0);
    const limits = {
      file: Number(root.dataset.uploadFile),
      files: Number(root.dataset.uploadFiles),
      bytes: Number(root.dataset.uploadBytes),
    };
    let refusal = "";
    if (file.size > limits.file) refusal = `${file.name} is larger than ${sizeWords(limits.file)}, the most one file may be.`;
    else if (held.length >= limits.files) refusal = `A message carries at most ${limits.files} files.`;
    else if (bytes + file.size > limits.bytes) refusal = `A message carries at most ${sizeWords(limits.bytes)} of files.`;
    if (refusal) {
      showError(`Not attached: ${refusal}`);
      return;
    }
    const item = chip(file.name, file.size);
    const body = new FormData();
    body.append("file", file, file.name);
    const done = (async () => {
      try {
        const response = await fetch(root.dataset.attachUrl, {
          method: "POST",
          body,
          headers: { "X-CSRFToken": csrfToken, Accept: "application/json" },
        });
        const data = await response.json().catch(() => ({}));
        if (!response.ok || !data.files) throw new Error(data.message || `The upload failed (${response.status}).`);
        const [stored] = data.files;
        item.dataset.fileId = stored.id;
        item.querySelector(".file-name").textContent = stored.name;
        item.querySelector(".muted").textContent = sizeWords(stored.size);
        item.querySelector("[data-file-remove]").hidden = false;
        item.querySelector("[data-file-remove]").setAttribute("aria-label", `Remove ${stored.name}`);
      } catch (failed) {
        item.remove();
        showError(`Not attached: ${failed.message}`);
      }
      changed();
    })();
    uploading.add(done);
    await done;
    uploading.delete(done);
  }

  function add(files) {
    for (const file of files) upload(file);
  }

  button.addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    add([...picker.files]);
    picker.value = "";
  });
  input.addEventListener("paste", (pasted) => {
    const files = [...(pasted.clipboardData?.files || [])];
    if (!files.length) return;
    // A pasted screenshot is a file; pasted text stays text.
    if (!pasted.clipboardData.getData("text/plain")) pasted.preventDefault();
    add(files);
  });
  const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
  root.addEventListener("dragover", (dragged) => {
    if (!carriesFiles(dragged)) return;
    dragged.preventDefault();
    form.classList.add("dropping");
  });
  root.addEventListener("dragleave", (left) => {
    if (left.target === root || !root.contains(left.relatedTarget)) form.classList.remove("dropping");
  });
  root.addEventListener("drop", (dropped) => {
    if (!carriesFiles(dropped)) return;
    dropped.preventDefault();
    form.classList.remove("dropping");
    add([...dropped.dataTransfer.files]);
  });
  chips.addEventListener("click", async (clicked) => {
    const remove = clicked.target.closest("[data-file-remove]");
    if (!remove) return;
    const item = remove.closest(".file-chip");
    const url = root.dataset.attachRemoveUrl.replace("00000000-0000-0000-0000-000000000000", item.dataset.fileId);
    const response = await fetch(url, { method: "POST", headers: { "X-CSRFToken": csrfToken } });
    // Gone already (sent from another tab) is as good as removed.
    if (response.ok || response.status === 404) item.remove();
    else showError("That file could not be removed; try again.");
    changed();
    input.focus();
  });
  changed();

  return {
    // Every upload given so far has finished (or failed).
    settled: () => Promise.all([...uploading]),
    ids: () => entries().map((entry) => entry.dataset.fileId).filter(Boolean),
    // The message named them: they leave the composer, until the server refuses it.
    sent() {
      for (const entry of entries()) {
        if (!entry.dataset.fileId) continue;
        entry.remove();
        away.push(entry);
      }
      changed();
    },
    // The message was refused: its files wait in the composer again.
    refused() {
      chips.append(...away.splice(0));
      changed();
    },
    // The message was stored: its files are sent for good.
    stored() {
      away.length = 0;
    },
  };
}
