// The run page's panel of the model call in flight: the text the model
// writes, as it writes it, gone once the call returned (its model_returned
// event shows the reply). The text is the model's, untrusted: it reaches
// the DOM as text nodes only.
import { h } from "./dom";
import { afterEvent, applyOutput, writingTitle, type Writing } from "./output";
import type { Event } from "./gen/rein/v1/event_pb";
import type { ModelOutput } from "./gen/rein/v1/run_service_pb";

export type WritingPanel = {
  el: HTMLElement;
  // output takes a message of the watch's model output; event, an event.
  output(m: ModelOutput): void;
  event(ev: Event): void;
  // clear hides the panel: the run ended.
  clear(): void;
};

export function writingPanel(): WritingPanel {
  const title = h("h3", {});
  const text = h("pre", { class: "writing-text text" });
  const more = h("p", { class: "note writing-truncated" }, "… (more not shown)");
  const el = h("section", { class: "writing card", "aria-busy": "true" }, title, text, more);
  el.hidden = true;
  let shown: Writing | undefined;

  const show = (w: Writing | undefined) => {
    if (w === shown) return;
    const prev = shown;
    shown = w;
    if (!w) {
      el.hidden = true;
      text.textContent = "";
      delete el.dataset.requested;
      delete el.dataset.attempt;
      return;
    }
    // Kept scrolled to the end while the reader is there.
    const atEnd = text.scrollHeight - text.scrollTop - text.clientHeight < 8;
    title.textContent = writingTitle(w);
    el.dataset.requested = String(w.requested);
    el.dataset.attempt = String(w.attempt);
    const same = prev && prev.requested === w.requested && prev.attempt === w.attempt && prev.resumed === w.resumed;
    if (same && w.text.startsWith(prev.text)) text.append(w.text.slice(prev.text.length));
    else text.textContent = w.text;
    more.hidden = !w.truncated;
    el.hidden = false;
    if (atEnd) text.scrollTop = text.scrollHeight;
  };

  return {
    el,
    output: (m) => show(applyOutput(shown, m)),
    event: (ev) => show(afterEvent(shown, ev)),
    clear: () => show(undefined),
  };
}
