// The console's client: RunService over Connect, on the page's own origin,
// with the signed-in person's token in the authorization header. The token
// lives in sessionStorage: this tab only, never a URL or a cookie.
import { createClient, ConnectError, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { RunService, type Caller } from "./gen/rein/v1/run_service_pb";

const tokenKey = "rein.token";

export function token(): string | null {
  return sessionStorage.getItem(tokenKey);
}

export function setToken(t: string | null): void {
  if (t === null) sessionStorage.removeItem(tokenKey);
  else sessionStorage.setItem(tokenKey, t);
}

const withToken: Interceptor = (next) => (req) => {
  const t = token();
  if (t) req.header.set("authorization", "Bearer " + t);
  return next(req);
};

export const api: Client<typeof RunService> = createClient(
  RunService,
  createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [withToken] }),
);

// The principal the server took this tab for, once signed in.
export let caller: Caller | undefined;

export async function signIn(): Promise<Caller> {
  const info = await api.getServerInfo({});
  if (!info.caller) throw new Error("the server did not say whom it took you for; is it an older rein?");
  caller = info.caller;
  return info.caller;
}

export function signOut(): void {
  caller = undefined;
  setToken(null);
}

// may reports whether the signed-in principal holds role, directly or
// through admin (all) or operator/approver (which include viewer), as the
// server's own rule says. It only hides buttons: the server decides.
export function may(role: "viewer" | "operator" | "approver" | "admin"): boolean {
  const roles = caller?.roles ?? [];
  return roles.some(
    (r) => r === role || r === "admin" || (role === "viewer" && (r === "operator" || r === "approver")),
  );
}

// explain is the server's answer to a refused call, for the person.
export function explain(err: unknown): string {
  if (err instanceof ConnectError) return `${codeName(err.code)}: ${err.rawMessage}`;
  if (err instanceof Error) return err.message;
  return String(err);
}

const codeNames = [
  "ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
  "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
  "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
];

function codeName(code: number): string {
  return codeNames[code] ?? `code ${code}`;
}
