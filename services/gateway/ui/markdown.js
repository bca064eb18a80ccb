// markdown.js: a small Markdown subset rendered as DOM nodes. Model output
// is untrusted: every piece of it becomes a text node (textContent), never
// markup, so "<script>" or "<img onerror=...>" shows as the characters it
// is. Blocks: fenced code, headings, lists, block quotes, rules,
// paragraphs; inline: `code`, **bold**, *emphasis*, [links](http...).
import { el } from './api.js';

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|\*([^*\s](?:[^*]*[^*\s])?)\*|\[([^\]\n]+)\]\(([^)\s]+)\)/g;

// Appends the inline content of text to parent.
function inline(parent, text) {
  let last = 0;
  const re = new RegExp(INLINE.source, 'g'); // one per call: it recurses
  for (let m; (m = re.exec(text));) {
    if (m.index > last) appendText(parent, text.slice(last, m.index));
    if (m[1] !== undefined) parent.append(el('code', {}, m[2]));
    else if (m[3] !== undefined) inline(parent.appendChild(el('strong')), m[3]);
    else if (m[4] !== undefined) inline(parent.appendChild(el('em')), m[4]);
    else if (/^https?:\/\//i.test(m[6])) {
      // A link is a navigation the reader chooses, never a request the
      // page makes; no referrer, no opener.
      const a = el('a', { href: m[6], target: '_blank', rel: 'noopener noreferrer' });
      inline(a, m[5]);
      parent.append(a);
    } else appendText(parent, m[0]);
    last = re.lastIndex;
  }
  if (last < text.length) appendText(parent, text.slice(last));
  return parent;
}

// Text with its line breaks kept as <br>.
function appendText(parent, text) {
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (i) parent.append(el('br'));
    if (line) parent.append(document.createTextNode(line));
  });
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;

// Renders text into a new <div class="md"> and returns it.
export function renderMarkdown(text) {
  const root = el('div', { class: 'md' });
  blocks(root, String(text ?? '').replace(/\r\n?/g, '\n').split('\n'));
  return root;
}

function blocks(root, lines) {
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) root.append(inline(el('p'), para.join('\n')));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const body = [];
      i++;
      // An unclosed fence (a stream still arriving) runs to the end.
      while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
      i++;
      const code = el('code', m[2] ? { class: `language-${m[2]}`, 'data-lang': m[2] } : {}, body.join('\n'));
      root.append(el('pre', {}, code));
      continue;
    }
    if (!line.trim()) { flush(); i++; continue; }
    if (RULE.test(line)) { flush(); root.append(el('hr')); i++; continue; }
    if ((m = HEADING.exec(line))) {
      flush();
      root.append(inline(el(`h${Math.min(6, m[1].length + 2)}`), m[2]));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const inner = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) { inner.push(m[1]); i++; }
      const q = el('blockquote');
      blocks(q, inner);
      root.append(q);
      continue;
    }
    if ((m = ITEM.exec(line))) {
      flush();
      const ordered = /\d/.test(m[1]);
      const list = el(ordered ? 'ol' : 'ul');
      while (i < lines.length && (m = ITEM.exec(lines[i])) && /\d/.test(m[1]) === ordered) {
        list.append(inline(el('li'), m[2]));
        i++;
      }
      root.append(list);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
}
