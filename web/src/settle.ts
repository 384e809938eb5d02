// settle: how a card sends one person's action and shows its answer.
import { explain } from "./api";
import { outcome } from "./dom";

// settle sends one person's action from a card and shows its answer. While
// the call is out the card says so (the pending page keeps a card whose
// outcome has text, so a live update that sees the run move on cannot drop
// the card before its answer arrives) and its buttons are off, so one click
// is one request. A refusal turns them back on; an accepted action leaves
// them off, since what the card showed is decided.
export async function settle(answer: HTMLElement, send: () => Promise<string>, done: () => void): Promise<void> {
  const card = answer.closest(".card");
  const buttons = card ? [...card.querySelectorAll("button")] : [];
  const off = (on: boolean) => {
    for (const b of buttons) {
      b.disabled = !on;
      if (on) b.removeAttribute("aria-disabled");
      else b.setAttribute("aria-disabled", "true");
    }
  };
  off(false);
  answer.className = "outcome sending";
  answer.textContent = "sending…";
  try {
    outcome(answer, true, await send());
    done();
  } catch (err) {
    outcome(answer, false, `refused: ${explain(err)}`);
    off(true);
  }
}

// refuse shows why what a person typed cannot be sent; nothing is sent.
export function refuse(answer: HTMLElement, why: string): void {
  outcome(answer, false, `not sent: ${why}`);
}
