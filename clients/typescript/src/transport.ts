// The transports of a client's servers: one gRPC (or Connect) transport per
// server, the bearer token, TLS and mTLS, and which server answered last.
import { isIP } from "node:net";
import { Code, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { RunService } from "./gen/rein/v1/run_service_pb.js";
import { toReinError, type ReinError } from "./errors.js";
import type { ConnectOptions } from "./client.js";

// The PEM contents (not file names) of the TLS material, as Node's tls
// options take them: read files with fs.readFileSync.
export interface TlsOptions {
  // The CA that signs the servers' certificates; unset: the system's roots.
  ca?: string | Buffer | Array<string | Buffer> | undefined;
  // The client's certificate and key, for mTLS (rein serve --client-ca).
  cert?: string | Buffer | undefined;
  key?: string | Buffer | undefined;
  // The name the servers' certificates are verified against, when it is
  // not each address's host.
  serverName?: string | undefined;
}

export type ServiceClient = Client<typeof RunService>;

export interface Server {
  address: string;
  runs: ServiceClient;
  close: () => void;
}

// What Pool takes of ConnectOptions.
export type DialOptions = Pick<ConnectOptions, "servers" | "token" | "tls" | "protocol" | "insecureToken" | "interceptors">;

// Pool is a client's servers, in the order they are tried, and the one that
// answered last. No connection is made until the first call.
export class Pool {
  readonly servers: Server[];
  // The server that answered last, as an index of servers.
  current = 0;

  constructor(opts: DialOptions) {
    if (!opts.servers || opts.servers.length === 0) {
      throw new Error("connect: no servers; give servers: ['host:port', …]");
    }
    const interceptors: Interceptor[] = [];
    if (opts.token) {
      const header = "Bearer " + opts.token;
      interceptors.push((next) => (req) => {
        req.header.set("authorization", header);
        return next(req);
      });
    }
    interceptors.push(...(opts.interceptors ?? []));
    this.servers = opts.servers.map((s) => dial(s, opts, interceptors));
  }

  // fail is the ReinError of a stream that ended on server at, and moves
  // on to the next server when that one is Unavailable.
  fail(at: number, e: unknown, signal: AbortSignal | undefined): ReinError {
    const err = toReinError(e, signal?.aborted);
    err.server ??= this.servers[at]!.address;
    if (err.code === Code.Unavailable && this.current === at) this.current = (at + 1) % this.servers.length;
    return err;
  }

  // Closes every connection; calls in flight end.
  close(): void {
    for (const s of this.servers) s.close();
  }
}

// dial makes one server's transport; no connection is made yet.
function dial(server: string, opts: DialOptions, interceptors: Interceptor[]): Server {
  const s = server.trim();
  if (s === "") throw new Error("connect: an empty address in servers; give host:port");
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(s) ? s : `${opts.tls ? "https" : "http"}://${s}`);
  } catch {
    throw new Error(`connect: server ${JSON.stringify(s)} is not host:port`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new Error(`connect: server ${s}: the scheme must be http or https`);
  }
  if (url.protocol === "http:" && opts.tls) {
    throw new Error(`connect: server ${s} is http://, but tls is set: give host:port or https://`);
  }
  if (!url.port) throw new Error(`connect: server ${s} has no port; give host:port`);
  const secure = url.protocol === "https:";
  if (opts.token && !secure && !opts.insecureToken && !loopback(url.hostname)) {
    throw new Error(
      `connect: refusing to send the bearer token in plaintext to ${s}, which is not a loopback address: ` +
        "use TLS (tls), or set insecureToken on a network you trust",
    );
  }
  const baseUrl = `${url.protocol}//${url.host}`;
  const nodeOptions = secure
    ? {
        ...(opts.tls?.ca !== undefined ? { ca: opts.tls.ca } : {}),
        ...(opts.tls?.cert !== undefined ? { cert: opts.tls.cert } : {}),
        ...(opts.tls?.key !== undefined ? { key: opts.tls.key } : {}),
        ...(opts.tls?.serverName !== undefined ? { servername: opts.tls.serverName } : {}),
      }
    : {};
  // Pings find a server gone silent under an open watch; rein's keepalive
  // policy allows one every 10 s.
  const sessionManager = new Http2SessionManager(baseUrl, { pingIntervalMs: 30_000, pingTimeoutMs: 15_000, connectTimeoutMs: 10_000 }, nodeOptions);
  const common = { baseUrl, httpVersion: "2" as const, sessionManager, interceptors, useBinaryFormat: true };
  const transport: Transport = opts.protocol === "connect" ? createConnectTransport(common) : createGrpcTransport(common);
  return { address: s, runs: createClient(RunService, transport), close: () => sessionManager.abort() };
}

// loopback reports whether host is this machine: "localhost" or a loopback
// IP. Names are not resolved.
function loopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (isIP(h) === 6) return h === "::1" || /^::ffff:127\./.test(h) || h === "0:0:0:0:0:0:0:1";
  return false;
}
