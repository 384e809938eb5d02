// The README's "Start, watch, approve" program, as a newcomer meets it: put
// in a fresh project that installs this package by path (and nothing else),
// type-checked under strict with exactOptionalPropertyTypes, and run as
// written against a real rein serve with tokens. And require() from
// CommonJS, which is told the package is ESM-only.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { pkgDir, repoDir, startServer, tempDir, tokensFile } from "./helpers.js";

// readmeProgram is the TypeScript block of the README's "Start, watch,
// approve" section.
function readmeProgram(): string {
  const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Start, watch, approve"));
  const m = /```ts\n([\s\S]*?)```/.exec(section);
  assert.ok(m, "the README's Start, watch, approve section has a ts block");
  return m[1]!;
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<Ran> {
  return new Promise((res, rej) => {
    execFile(cmd, args, { cwd, env: { ...process.env, ...env }, timeout: 120_000 }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") return rej(err);
      res({ code: err ? (err.code as number) : 0, stdout, stderr });
    });
  });
}

// project makes a fresh ESM project in a temporary directory that
// installs this package by path, offline (its dependencies are in its own
// node_modules), and writes files into it.
async function project(t: Parameters<typeof tempDir>[0], files: Record<string, string>): Promise<string> {
  const dir = tempDir(t);
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "readme-check", private: true, type: "module" }));
  const npm = await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", pkgDir], dir);
  assert.equal(npm.code, 0, npm.stderr);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

test("the README's program type-checks strict with exactOptionalPropertyTypes in a fresh project and runs as written with tokens; with the operator's token for the approval it is refused", async (t) => {
  const dir = await project(t, {
    "main.ts": readmeProgram(),
    "tsconfig.json": JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        exactOptionalPropertyTypes: true,
        types: ["node"],
        typeRoots: [join(pkgDir, "node_modules/@types")],
        outDir: "out",
      },
      files: ["main.ts"],
    }),
  });
  const tsc = await run(process.execPath, [join(pkgDir, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], dir);
  assert.equal(tsc.code, 0, tsc.stdout + tsc.stderr);
  assert.doesNotMatch(readmeProgram(), /@bufbuild\/protobuf/, "the README needs no protobuf import");

  // olga may only operate, alice only approve.
  const sha = (s: string) => createHash("sha256").update(s).digest("hex");
  const extra = [
    { id: "olga", tenant: "ts", roles: ["operator"], token_sha256: sha("olga-token") },
    { id: "alice", tenant: "ts", roles: ["approver"], token_sha256: sha("alice-token") },
  ];
  const srv = await startServer(t, { args: ["--tokens", tokensFile(tempDir(t), extra)] });
  const main = join(dir, "out/main.js");
  const ok = await run(process.execPath, [main], repoDir, { REIN_SERVER: srv.address, REIN_TOKEN: "olga-token", REIN_APPROVER_TOKEN: "alice-token" });
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /approvalRequested/);
  assert.match(ok.stdout, /refunds\.create would write \{"/, `the preview prints as plain JSON:\n${ok.stdout}`);
  assert.doesNotMatch(ok.stdout, /"kind"|\$typeName/);
  assert.match(ok.stdout, /COMPLETED Refunded the duplicate charge/);

  const refused = await run(process.execPath, [main], repoDir, { REIN_SERVER: srv.address, REIN_TOKEN: "olga-token", REIN_APPROVER_TOKEN: "olga-token" });
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /PermissionDeniedError/);
  assert.doesNotMatch(refused.stdout, /COMPLETED/);
});

test("require() of the package from CommonJS throws that it is ESM-only and how to load it; import() loads it", async (t) => {
  const dir = await project(t, {
    "req.cjs": 'try { require("@reinhq/rein-client"); } catch (e) { console.log(e.message); process.exit(3); }\n',
    "imp.cjs": 'import("@reinhq/rein-client").then((m) => console.log(typeof m.connect, typeof m.contractFromJson));\n',
  });
  const req = await run(process.execPath, ["req.cjs"], dir);
  assert.equal(req.code, 3, req.stderr);
  assert.equal(req.stdout.trim(), '@reinhq/rein-client is ESM-only: use import, or await import("@reinhq/rein-client") from CommonJS');
  const imp = await run(process.execPath, ["imp.cjs"], dir);
  assert.equal(imp.code, 0, imp.stderr);
  assert.equal(imp.stdout.trim(), "function function");
});
