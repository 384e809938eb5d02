// DOM helpers. Every string becomes a text node: nothing the console shows
// (a model's words, a tool's output, a reason) reaches the DOM as markup.
// There is no innerHTML in the console.

export type Child = Node | string | null | undefined | false;

// kids drops the absent children, for replaceChildren.
export function kids(...c: Child[]): (Node | string)[] {
  return c.filter((x): x is Node | string => x !== null && x !== undefined && x !== false);
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

export function button(label: string, onClick: () => void, attrs: Record<string, string> = {}): HTMLButtonElement {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", onClick);
  return b;
}

// cut shows at most limit characters of text, with a button for the rest.
export function cut(text: string, limit = 240): HTMLElement {
  const el = h("span", { class: "text" });
  if (text.length <= limit) {
    el.textContent = text;
    return el;
  }
  el.textContent = text.slice(0, limit) + "…";
  const more = button(`show all ${text.length} characters`, () => {
    el.textContent = text;
  }, { class: "more" });
  return h("span", {}, el, " ", more);
}

// outcome shows an action's answer: what happened, or why it was refused.
export function outcome(el: HTMLElement, ok: boolean, text: string): void {
  el.className = ok ? "outcome ok" : "outcome refused";
  el.textContent = text;
}

export function age(d: Date | undefined, now = Date.now()): string {
  if (!d) return "";
  const s = Math.max(0, Math.round((now - d.getTime()) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// diff renders a unified diff line by line, each line a text node.
export function diff(text: string): HTMLElement {
  const pre = h("pre", { class: "diff" });
  for (const line of text.replace(/\n$/, "").split("\n")) {
    let cls = "ctx";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    pre.append(h("span", { class: cls }, line), "\n");
  }
  return pre;
}

// reconcile makes parent's children want, in order, moving only the nodes
// out of place: a card the person is typing in keeps its focus.
export function reconcile(parent: HTMLElement, want: Node[]): void {
  for (const c of [...parent.childNodes]) if (!want.includes(c)) c.remove();
  want.forEach((n, i) => {
    if (parent.childNodes[i] !== n) parent.insertBefore(n, parent.childNodes[i] ?? null);
  });
}
