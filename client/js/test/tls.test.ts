// TLS and mutual TLS against the real server (certificates made with openssl).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Client, TicketingError, TlsError } from "../src/index.js";
import { startServer } from "./helpers.js";

let dir: string;
const f = (n: string): string => join(dir, n);
const ssl = (...args: string[]): void => {
  execFileSync("openssl", args, { stdio: "ignore" });
};

function makeCA(name: string): void {
  ssl(
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-days",
    "2",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    f(`${name}.key`),
    "-out",
    f(`${name}.pem`),
  );
}

function makeCert(name: string, ca: string, ext: string): void {
  ssl(
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    f(`${name}.key`),
    "-out",
    f(`${name}.csr`),
  );
  writeFileSync(f(`${name}.ext`), ext);
  ssl(
    "x509",
    "-req",
    "-in",
    f(`${name}.csr`),
    "-CA",
    f(`${ca}.pem`),
    "-CAkey",
    f(`${ca}.key`),
    "-CAcreateserial",
    "-days",
    "2",
    "-extfile",
    f(`${name}.ext`),
    "-out",
    f(`${name}.pem`),
  );
}

before(() => {
  dir = mkdtempSync(join(tmpdir(), "tkjs-tls-"));
  makeCA("ca");
  makeCA("otherca");
  makeCert(
    "server",
    "ca",
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
  );
  makeCert("client", "ca", "extendedKeyUsage=clientAuth\n");
});

after(() => {
  rmSync(dir, { recursive: true, force: true });
});

test("TLS: verified server works; an unknown CA is a TLS error", async () => {
  const s = await startServer([
    "--tls-cert",
    f("server.pem"),
    "--tls-key",
    f("server.key"),
  ]);
  try {
    const c = await Client.connect({
      addrs: [s.addr],
      tls: { ca: readFileSync(f("ca.pem")) },
    });
    await (await c.acquire("tls/a", { leaseMs: 1000 })).release();
    await c.close();
    const byName = await Client.connect({
      addrs: [s.addr],
      tls: { ca: readFileSync(f("ca.pem")), servername: "localhost" },
    });
    await (await byName.acquire("tls/b", { leaseMs: 1000 })).release();
    await byName.close();
    await assert.rejects(
      Client.connect({
        addrs: [s.addr],
        tls: { ca: readFileSync(f("otherca.pem")) },
        connectTimeoutMs: 3000,
      }),
      TlsError,
    );
  } finally {
    await s.stop();
  }
});

test("mutual TLS: a client certificate is required", async () => {
  const s = await startServer([
    "--tls-cert",
    f("server.pem"),
    "--tls-key",
    f("server.key"),
    "--tls-client-ca",
    f("ca.pem"),
  ]);
  try {
    const c = await Client.connect({
      addrs: [s.addr],
      tls: {
        ca: readFileSync(f("ca.pem")),
        cert: readFileSync(f("client.pem")),
        key: readFileSync(f("client.key")),
      },
    });
    await (await c.acquire("mtls/a", { leaseMs: 1000 })).release();
    await c.close();
    await assert.rejects(
      Client.connect({
        addrs: [s.addr],
        tls: { ca: readFileSync(f("ca.pem")) },
        connectTimeoutMs: 3000,
      }),
      (e: unknown) =>
        e instanceof TicketingError &&
        (e.code === "TLS" || e.code === "CONNECT"),
    );
  } finally {
    await s.stop();
  }
});
