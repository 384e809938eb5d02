// A run paused on its budget: the limit it reached, why, when the pause
// ends it, what it has spent, and a form that raises the budget.
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { api, may } from "./api";
import { button, h } from "./dom";
import { statusName, time, usage } from "./format";
import { count, count32, duration, usd } from "./parse";
import { refuse, settle } from "./settle";
import type { BudgetPause, Run } from "./gen/rein/v1/run_pb";

// raiseField is one labelled entry of the raise form.
function raiseField(label: string, input: HTMLInputElement): HTMLElement {
  return h("label", { class: "raise-field" }, label, " ", input);
}

// numberInput is an entry for an amount to add, named what in refusals.
function numberInput(cls: string, step: string, what: string): HTMLInputElement {
  return h("input", { type: "number", class: cls, min: "0", step, placeholder: "0", "data-what": what });
}

export function budgetCard(run: Run, pause: BudgetPause, done: () => void): HTMLElement {
  const answer = h("p", { class: "outcome", "aria-live": "polite" });
  const steps = numberInput("add-steps", "1", "add steps");
  const tokens = numberInput("add-tokens", "1", "add tokens");
  const tools = numberInput("add-tool-calls", "1", "add tool calls");
  const dollars = numberInput("add-usd", "0.01", "add USD");
  const extend = h("input", { type: "text", class: "extend-deadline", placeholder: "e.g. 30m, 1h30m" });
  const reason = h("input", { type: "text", class: "reason", placeholder: "reason (recorded in the run's log)" });

  // raise reads the form; an entry it cannot read is refused here and
  // nothing is sent, as is a form that adds nothing.
  const raise = () => {
    // A browser empties a number entry it cannot read: say so, not "none".
    const unread = [steps, tokens, tools, dollars].find((i) => i.validity.badInput);
    if (unread) return refuse(answer, `${unread.dataset.what}: not a number`);
    const addSteps = count32(steps.value, "add steps");
    if (typeof addSteps === "string") return refuse(answer, addSteps);
    const addTokens = count(tokens.value, "add tokens");
    if (typeof addTokens === "string") return refuse(answer, addTokens);
    const addToolCalls = count32(tools.value, "add tool calls");
    if (typeof addToolCalls === "string") return refuse(answer, addToolCalls);
    const addCostUsd = usd(dollars.value);
    if (typeof addCostUsd === "string") return refuse(answer, addCostUsd);
    const ms = duration(extend.value);
    if (typeof ms === "string") return refuse(answer, ms);
    if (!addSteps && !addTokens && !addToolCalls && !addCostUsd && !ms) {
      return refuse(answer, "a raise adds something: fill in at least one of steps, tokens, tool calls, USD or extend deadline");
    }
    void settle(answer, async () => {
      const got = await api.raiseBudget({
        runId: run.runId, addSteps, addTokens, addToolCalls, addCostUsd, reason: reason.value,
        extendDeadline: ms ? durationFromMs(ms) : undefined,
      });
      return `raised: the run is ${statusName(got.run?.status ?? 0)}`;
    }, done);
  };

  const u = usage(run);
  const controls = may("approver") || may("operator")
    ? h("div", { class: "raise" },
        raiseField("add steps", steps), " ", raiseField("add tokens", tokens), " ",
        raiseField("add tool calls", tools), " ", raiseField("add USD", dollars), " ",
        raiseField("extend deadline", extend), " ", reason, " ",
        button("Raise budget", raise, { class: "raise-budget" }))
    : h("p", { class: "note" }, "raising a budget needs the operator or approver role");
  return h("section", { class: "card budget-pause", "data-run": run.runId, "data-limit": pause.limit },
    h("h3", {}, "Budget reached in ", h("a", { href: `#/runs/${run.runId}` }, run.runId)),
    h("dl", {},
      h("dt", {}, "limit"), h("dd", { class: "limit" }, pause.limit),
      h("dt", {}, "detail"), h("dd", { class: "detail text" }, pause.detail),
      h("dt", {}, "pause ends"), h("dd", { class: "expires" }, time(pause.expiresAt)),
      h("dt", {}, "started by"), h("dd", {}, run.principal),
      h("dt", {}, "goal"), h("dd", { class: "text" }, run.contract?.goal ?? ""),
      h("dt", {}, "spent"), h("dd", {}, `steps ${u.steps}, tokens ${u.tokens}, tool calls ${u.tools}, cost ${u.cost}`),
    ),
    controls, answer);
}
