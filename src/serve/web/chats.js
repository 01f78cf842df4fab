// The chats the page keeps in the browser, so that a reload or a later visit
// finds them. One localStorage key holds a versioned JSON document:
//
//   {"v": 1, "open": ID or null, "chats": [{"id", "title", "time", "messages"}]}
//
// newest first, at most MAX_CHATS (the oldest go). A message is {role,
// content} with, for an answer, the line shown under it (`note`) and, when
// probabilities were asked, its tokens in the compact form of tokens.js.
// Storage can be disabled or full: nothing here throws for that; `problem`
// says what was lost, for the page to show.
'use strict';

const CHATS_STORAGE = 'tensorpc.chats';
const CHATS_VERSION = 1;
const MAX_CHATS = 50;
const TITLE_CHARS = 60;

// localStorage may be missing, or throw on any use (storage disabled).
function storageGet(key) {
  try { return localStorage.getItem(key); } catch { return null; }
}

// Null when stored, else the error.
function storageSet(key, value) {
  try {
    localStorage.setItem(key, value);
    return null;
  } catch (err) {
    return err;
  }
}

const isQuotaError = (err) => err?.name === 'QuotaExceededError' || err?.code === 22;

// A chat's title: its first question on one line, cut to TITLE_CHARS.
function chatTitle(text) {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > TITLE_CHARS ? `${line.slice(0, TITLE_CHARS - 1)}…` : line;
}

function blankChat() {
  const id = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  return { id, title: '', time: 0, messages: [] };
}

const validChat = (c) => c && typeof c.id === 'string' && typeof c.title === 'string' &&
  typeof c.time === 'number' && Array.isArray(c.messages) &&
  c.messages.every((m) => m && typeof m.role === 'string' && typeof m.content === 'string');

class ChatStore {
  constructor() {
    this.chats = [];      // newest first
    this.openId = null;   // the chat shown, once stored
    this.problem = null;  // what the page should say about storage, or null
    this.removed = new Set();  // ids deleted: an answer that finishes later does not bring them back
    const text = storageGet(CHATS_STORAGE);
    if (text == null) return;
    try {
      const doc = JSON.parse(text);
      if (doc?.v !== CHATS_VERSION || !Array.isArray(doc.chats)) throw new Error('unknown format');
      this.chats = doc.chats.filter(validChat).slice(0, MAX_CHATS);
      this.openId = this.get(doc.open) ? doc.open : null;
    } catch {
      this.problem = 'The stored chats could not be read; they are replaced as new ones are saved.';
    }
  }

  get(id) {
    return this.chats.find((c) => c.id === id) ?? null;
  }

  // Stores `chat` (new or changed) as the newest, unless it was deleted;
  // `open`: as the one shown.
  save(chat, open = false) {
    if (this.removed.has(chat.id)) return;
    chat.time = Date.now();
    this.chats = [chat, ...this.chats.filter((c) => c.id !== chat.id)].slice(0, MAX_CHATS);
    if (open) this.openId = chat.id;
    this.write();
  }

  remove(id) {
    this.removed.add(id);
    this.chats = this.chats.filter((c) => c.id !== id);
    if (this.openId === id) this.openId = null;
    this.write();
  }

  setOpen(id) {
    this.openId = id;
    this.write();
  }

  // Writes the document; while the storage is full, without the oldest chat
  // (never the newest). Sets `problem` when something was not kept.
  write() {
    let dropped = 0;
    for (;;) {
      const err = storageSet(CHATS_STORAGE, JSON.stringify({ v: CHATS_VERSION, open: this.openId, chats: this.chats }));
      if (!err) {
        const which = dropped === 1 ? 'oldest chat was' : `${dropped} oldest chats were`;
        this.problem = dropped ? `The browser's storage is full: the ${which} dropped.` : null;
        return;
      }
      if (!isQuotaError(err) || this.chats.length <= 1) {
        this.problem = isQuotaError(err) ? "The browser's storage is full: this chat is not kept."
          : `Chats are not kept: the browser's storage is unavailable (${err.message || err.name}).`;
        return;
      }
      this.chats.pop();
      dropped++;
    }
  }
}
