// rein's web console: sign in, then the runs, one run, and what is pending.
// Pages are chosen by the URL's fragment: #/runs, #/runs/ID (#/runs/ID/events/SEQ
// shows the event SEQ on its timeline), #/pending.
import { caller, explain, setToken, signIn, signOut, token } from "./api";
import { button, h, kids } from "./dom";
import { pendingPage } from "./pending";
import { runPage } from "./run";
import { runsPage } from "./runs";

const who = document.getElementById("who")!;
const main = document.getElementById("main")!;
let leave = new AbortController();

function signInPage(message: string): void {
  const input = h("input", { type: "password", id: "token", autocomplete: "off", placeholder: "paste your rein token" });
  const answer = h("p", { class: message ? "outcome refused" : "outcome" }, message);
  const form = h("form", { class: "sign-in" },
    h("h2", {}, "Sign in"),
    h("p", {}, "Paste the bearer token your rein operator gave you. It is kept for this tab only and sent in the authorization header."),
    input, " ", h("button", { type: "submit", id: "sign-in" }, "Sign in"), answer);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    try {
      await signIn();
      route();
    } catch (err) {
      setToken(null);
      answer.className = "outcome refused";
      answer.textContent = `not signed in: ${explain(err)}`;
    }
  });
  who.replaceChildren();
  main.replaceChildren(form);
  input.focus();
}

function header(): void {
  if (!caller) return;
  who.replaceChildren(...kids(
    h("nav", {}, h("a", { href: "#/runs" }, "Runs"), " ", h("a", { href: "#/pending" }, "Pending")),
    h("span", { class: "signed-in" }, "signed in as ", h("strong", { id: "principal" }, caller.principal),
      ` (tenant ${caller.tenant}; roles `, h("span", { id: "roles" }, caller.roles.join(", ")), ") "),
    token() ? button("Sign out", () => { signOut(); route(); }, { id: "sign-out" }) : null));
}

function route(): void {
  leave.abort();
  leave = new AbortController();
  if (!caller) {
    signInPage("");
    return;
  }
  header();
  const path = location.hash.replace(/^#/, "") || "/runs";
  const m = /^\/runs\/([^/]+)(?:\/events\/(\d+))?$/.exec(path);
  if (m) runPage(main, decodeURIComponent(m[1]!), leave.signal, m[2] ? BigInt(m[2]) : undefined);
  else if (path === "/pending") pendingPage(main, leave.signal);
  else runsPage(main, leave.signal);
}

window.addEventListener("hashchange", route);

// A server without --tokens takes local callers as its admin, and a token
// this tab kept is tried again: either signs in without the form.
signIn().then(route, (err) => {
  if (token()) signInPage(`not signed in: ${explain(err)}`);
  else signInPage("");
});
