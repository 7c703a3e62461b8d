// TLS and bearer credentials, against an in-process TLS gRPC server (the services serve only
// plaintext until the trust-boundary work lands): a self-signed certificate made by openssl.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ExecutorService, LockgateError, createExecutorClient } from "../src/index.js";

describe("TLS and bearer credentials", () => {
  let server: http2.Http2SecureServer;
  let address = "";
  let cert = "";
  const sessions = new Set<http2.ServerHttp2Session>();

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "lockgate-ts-tls-"));
    try {
      execFileSync("openssl", [
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=IP:127.0.0.1",
        "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"),
      ], { stdio: "ignore" });
      cert = readFileSync(join(dir, "cert.pem"), "utf8");
      const key = readFileSync(join(dir, "key.pem"), "utf8");
      // The server echoes the authorization header it received as the executor id.
      server = http2.createSecureServer(
        { key, cert },
        connectNodeAdapter({
          routes: (router) =>
            router.service(ExecutorService, {
              getExecutorStatus: (_request, context) => ({ executorId: context.requestHeader.get("authorization") ?? "" }),
            }),
          grpc: true,
          grpcWeb: false,
          connect: false,
        }),
      );
      server.on("session", (session) => {
        sessions.add(session);
        session.once("close", () => sessions.delete(session));
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  after(async () => {
    for (const session of sessions) session.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  test("a token function is called for every call and sent as a bearer token over TLS", async () => {
    let issued = 0;
    const client = createExecutorClient(address, { tls: { ca: cert }, bearerToken: async () => `token-${++issued}` });
    try {
      assert.equal((await client.getExecutorStatus({})).executorId, "Bearer token-1");
      assert.equal((await client.getExecutorStatus({})).executorId, "Bearer token-2");
    } finally {
      client.close();
    }
  });

  test("a server certificate the client does not trust fails the call", async () => {
    const client = createExecutorClient(address, { tls: {}, bearerToken: "secret" });
    try {
      await assert.rejects(client.getExecutorStatus({}, { timeoutMs: 1_000 }), LockgateError);
    } finally {
      client.close();
    }
  });

  test("a bearer token without TLS is refused before any call", () => {
    assert.throws(() => createExecutorClient(address, { bearerToken: "secret" }), /needs tls/);
  });
});
