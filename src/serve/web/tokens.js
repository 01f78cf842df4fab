// Token probabilities in an answer: when the settings ask for them, the
// answer is shown as one span per token, and hovering or focusing one (a tap
// focuses it) shows its probability and the top alternatives in #token-tip.
// Arrow keys move between the tokens of an answer, Escape hides the tip.
//
// A token is kept in a compact form, the one stored with the chat:
//   [text, logprob, [[alternative, logprob], ...]]
// Uses el() of app.js (loaded after this file, called only from events).
'use strict';

const roundLogprob = (lp) => Math.round(lp * 1e4) / 1e4;

// `decoder`: one TextDecoder in stream mode over an answer's tokens, so that a
// character split across tokens goes whole to the token that completes it.
function compactToken(entry, decoder) {
  const text = Array.isArray(entry.bytes) ? decoder.decode(new Uint8Array(entry.bytes), { stream: true }) : entry.token;
  const top = (entry.top_logprobs ?? []).map((t) => [t.token, roundLogprob(t.logprob)]);
  return [text, roundLogprob(entry.logprob), top];
}

function percent(logprob) {
  const p = 100 * Math.exp(logprob);
  return p < 0.1 ? '<0.1%' : `${p.toFixed(1)}%`;
}

// A token as shown in the tip: spaces and line breaks visible.
const visibleToken = (text) => text.replace(/ /g, '␣').replace(/\n/g, '↵').replace(/\t/g, '⇥') || '∅';

const tokenOf = new WeakMap();  // span -> its compact token

// Lays an answer's tokens over its text, in `container`. The text decides
// what is shown: a token whose text is not the next part of it (a special
// token, half a character) is not shown; text no token covers is shown plain.
class TokenSpans {
  constructor(container) {
    this.container = container;
    this.decoder = new TextDecoder();
    this.tokens = [];   // every token received, compact: what is stored
    this.pending = [];  // tokens not yet laid over the text
    this.text = '';     // text not yet laid out
  }

  // A streamed piece of text, and the log probabilities of its tokens.
  add(piece, entries = []) {
    for (const e of entries) this.addCompact(compactToken(e, this.decoder));
    this.text += piece;
    this.layOut(false);
  }

  addCompact(token) {
    this.tokens.push(token);
    this.pending.push(token);
  }

  // `end`: no more text or tokens will come.
  layOut(end) {
    while (this.pending.length) {
      const token = this.pending[0];
      const text = token[0];
      if (text && this.text.startsWith(text)) {
        this.append(token);
        this.text = this.text.slice(text.length);
      } else if (text && !end && text.startsWith(this.text)) {
        break;  // its text has not all come yet
      }
      this.pending.shift();
    }
    if (end && this.text) {
      this.container.append(this.text);
      this.text = '';
    }
  }

  append(token) {
    const span = document.createElement('span');
    span.className = 'tok';
    span.textContent = token[0];
    // One tab stop per answer; arrow keys move within it.
    span.tabIndex = this.container.querySelector('.tok') ? -1 : 0;
    tokenOf.set(span, token);
    this.container.append(span);
  }

  // An answer restored from storage.
  static render(container, content, tokens) {
    const spans = new TokenSpans(container);
    for (const t of tokens) spans.addCompact(t);
    spans.text = content;
    spans.layOut(true);
  }
}

function showTokenTip(span) {
  const tip = $('token-tip');
  const [text, logprob, top] = tokenOf.get(span);
  tip.replaceChildren(
    el('div', 'tip-head', el('code', '', visibleToken(text)), el('span', '', percent(logprob))),
    top.length ? el('ol', 'tip-alts', ...top.map(([alt, lp]) =>
      el('li', alt === text ? 'chosen' : '', el('code', '', visibleToken(alt)), el('span', '', percent(lp))))) : null);
  tip.hidden = false;
  span.setAttribute('aria-describedby', 'token-tip');
  // Below the token, or above it when there is no room; inside the window.
  const r = span.getBoundingClientRect();
  const below = r.bottom + 6 + tip.offsetHeight <= window.innerHeight;
  tip.style.top = `${below ? r.bottom + 6 : Math.max(4, r.top - 6 - tip.offsetHeight)}px`;
  tip.style.left = `${Math.max(4, Math.min(r.left, window.innerWidth - tip.offsetWidth - 4))}px`;
}

function hideTokenTip() {
  $('token-tip').hidden = true;
  document.querySelector('.tok[aria-describedby]')?.removeAttribute('aria-describedby');
}

function watchTokens(messages) {
  const tokenAt = (e) => e.target.closest?.('.tok') ?? null;
  messages.addEventListener('mouseover', (e) => { const t = tokenAt(e); if (t) showTokenTip(t); });
  messages.addEventListener('mouseout', (e) => {
    if (tokenAt(e) && document.activeElement !== tokenAt(e)) hideTokenTip();
  });
  messages.addEventListener('focusin', (e) => {
    const t = tokenAt(e);
    if (!t) return;
    for (const other of t.parentElement.querySelectorAll('.tok[tabindex="0"]')) other.tabIndex = -1;
    t.tabIndex = 0;
    showTokenTip(t);
  });
  messages.addEventListener('focusout', (e) => { if (tokenAt(e)) hideTokenTip(); });
  messages.addEventListener('keydown', (e) => {
    const t = tokenAt(e);
    if (!t) return;
    if (e.key === 'Escape') {
      hideTokenTip();
    } else if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      const tokens = [...t.parentElement.querySelectorAll('.tok')];
      const next = tokens[tokens.indexOf(t) + (e.key === 'ArrowRight' ? 1 : -1)];
      if (next) { e.preventDefault(); next.focus(); }
    }
  });
  messages.addEventListener('scroll', hideTokenTip);
}
