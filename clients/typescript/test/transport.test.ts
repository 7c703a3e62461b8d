// The retry and redirect policy of LeaderFollowingTransport, and LockgateError's decoding,
// against scripted in-process transports (no network).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport, type UnaryResponse, createClient } from "@connectrpc/connect";
import { BadRequestSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { FencingFailureSchema, FencingToken } from "../src/gen/lockgate/v1/common_pb.js";
import { CoordinatorService, type PausePipelineRequest } from "../src/gen/lockgate/v1/coordinator_pb.js";
import { LEADER_METADATA_KEY, LockgateError, LeaderFollowingTransport } from "../src/index.js";

interface Attempt {
  readonly address: string;
  readonly request: PausePipelineRequest;
  readonly timeoutMs: number | undefined;
}

/** Transports whose every call is answered by `answer(address, attemptNumber)`. */
function scripted(answer: (address: string, attempt: number) => ConnectError | undefined): {
  attempts: Attempt[];
  connect: (address: string) => Transport;
} {
  const attempts: Attempt[] = [];
  const connect = (address: string): Transport => ({
    async unary(method, _signal, timeoutMs, _header, input) {
      attempts.push({ address, request: input as PausePipelineRequest, timeoutMs });
      const error = answer(address, attempts.length);
      if (error !== undefined) throw error;
      return {
        stream: false,
        service: method.parent,
        method,
        header: new Headers(),
        trailer: new Headers(),
        message: create(method.output),
      } as UnaryResponse<never, never>;
    },
    stream() {
      throw new Error("no streams here");
    },
  });
  return { attempts, connect };
}

function notLeader(leader: string | undefined): ConnectError {
  const metadata = new Headers(leader === undefined ? {} : { [LEADER_METADATA_KEY]: leader });
  return new ConnectError("not the leader", Code.Unavailable, metadata);
}

const fast = { initialBackoffMs: 5, maxBackoffMs: 20 };
/** How late a timer may fire before a deadline counts as passed, in ms (see its test). */
const TIMER_SLACK_MS = 10;

describe("LeaderFollowingTransport", () => {
  test("follows the lockgate-leader redirect at once and keeps calling the leader", async () => {
    const { attempts, connect } = scripted((address) => (address === "c2:2" ? undefined : notLeader("c2:2")));
    const transport = new LeaderFollowingTransport(["c1:1", "c2:2", "c3:3"], connect, fast);
    const client = createClient(CoordinatorService, transport);
    await client.pausePipeline({ name: "p" });
    await client.pausePipeline({ name: "p" });
    assert.deepEqual(
      attempts.map((a) => a.address),
      ["c1:1", "c2:2", "c2:2"],
    );
    assert.equal(transport.currentAddress, "c2:2");
  });

  test("without a leader address, backs off and tries the next replica; one request_id for all attempts", async () => {
    const { attempts, connect } = scripted((_address, attempt) =>
      attempt < 3 ? new ConnectError("connection refused", Code.Unavailable) : undefined,
    );
    const client = createClient(CoordinatorService, new LeaderFollowingTransport(["c1:1", "c2:2"], connect, fast));
    const request = { name: "p" };
    await client.pausePipeline(request, { timeoutMs: 5_000 });
    assert.deepEqual(
      attempts.map((a) => a.address),
      ["c1:1", "c2:2", "c1:1"],
    );
    const ids = new Set(attempts.map((a) => a.request.requestId));
    assert.equal(ids.size, 1, "every attempt of one call carries the same request_id");
    assert.match([...ids][0] ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.deepEqual(request, { name: "p" }, "the caller's request object is left unchanged");
    for (const attempt of attempts) assert.ok(attempt.timeoutMs !== undefined && attempt.timeoutMs <= 5_000);
    // A second logical call gets a new id; a caller's own id is kept.
    await client.pausePipeline({ name: "p" });
    await client.pausePipeline({ name: "p", requestId: "mine" });
    assert.notEqual(attempts[3]?.request.requestId, attempts[0]?.request.requestId);
    assert.equal(attempts[4]?.request.requestId, "mine");
  });

  test("surfaces UNAVAILABLE once the next back-off would pass the call's deadline", async () => {
    const { attempts, connect } = scripted(() => notLeader(undefined));
    const client = createClient(CoordinatorService, new LeaderFollowingTransport(["c1:1", "c2:2"], connect, fast));
    const started = performance.now();
    const error = await client.pausePipeline({ name: "p" }, { timeoutMs: 300 }).then(
      () => assert.fail("expected UNAVAILABLE"),
      (err: unknown) => err,
    );
    const elapsed = performance.now() - started;
    assert.ok(error instanceof LockgateError);
    assert.equal(error.code, Code.Unavailable);
    // Node's timers fire a little late under load (CI saw 300.5 ms): a few ms of slack, less
    // than the 20 ms back-off a transport sleeping past the deadline would add.
    assert.ok(elapsed < 300 + TIMER_SLACK_MS, `gave up after ${elapsed} ms, past the 300 ms deadline`);
    assert.ok(attempts.length >= 5, `only ${attempts.length} attempts in 300 ms`);
  });

  test("does not retry other codes, and decodes their details", async () => {
    const violation = { field: "sink.kafka.topic", description: "is required" };
    const { attempts, connect } = scripted(
      () =>
        new ConnectError("bad spec", Code.InvalidArgument, undefined, [
          { desc: BadRequestSchema, value: { fieldViolations: [violation] } },
        ]),
    );
    const client = createClient(CoordinatorService, new LeaderFollowingTransport(["c1:1", "c2:2"], connect, fast));
    await assert.rejects(client.createPipeline({}), (err: unknown) => {
      assert.ok(err instanceof LockgateError);
      assert.equal(err.codeName, "INVALID_ARGUMENT");
      assert.deepEqual(err.fieldViolations, [violation]);
      return true;
    });
    assert.equal(attempts.length, 1);
  });

  test("retries a stream reset under the call (CANCEL, no gRPC status), not the caller's own abort", async () => {
    const { attempts, connect } = scripted((_address, attempt) =>
      attempt < 2 ? new ConnectError("http/2 stream closed with error code CANCEL (0x8)", Code.Canceled) : undefined,
    );
    const client = createClient(CoordinatorService, new LeaderFollowingTransport(["c1:1", "c2:2"], connect, fast));
    await client.pausePipeline({ name: "p" }, { timeoutMs: 5_000 });
    assert.deepEqual(
      attempts.map((a) => a.address),
      ["c1:1", "c2:2"],
    );
    const aborted = new AbortController();
    aborted.abort();
    const cancelled = scripted(() => new ConnectError("the caller aborted", Code.Canceled));
    const own = createClient(CoordinatorService, new LeaderFollowingTransport(["c1:1"], cancelled.connect, fast));
    await assert.rejects(own.pausePipeline({ name: "p" }, { signal: aborted.signal }), (err: unknown) => {
      assert.ok(err instanceof LockgateError);
      assert.equal(err.code, Code.Canceled);
      return true;
    });
    assert.equal(cancelled.attempts.length, 1);
  });

  test("refuses an address without a port", () => {
    assert.throws(() => new LeaderFollowingTransport(["localhost"], scripted(() => undefined).connect), /HOST:PORT/);
  });
});

describe("LockgateError", () => {
  test("exposes a FencingFailure detail and the leader address", () => {
    const failure = { token: FencingToken.LEADER_EPOCH, subject: "", presented: 1n, current: 2n };
    const error = LockgateError.from(
      new ConnectError("stale epoch", Code.FailedPrecondition, new Headers({ [LEADER_METADATA_KEY]: "c9:9" }), [
        { desc: FencingFailureSchema, value: failure },
      ]),
    );
    assert.equal(error.codeName, "FAILED_PRECONDITION");
    assert.equal(error.message, "FAILED_PRECONDITION: stale epoch");
    assert.equal(error.fencingFailure?.token, FencingToken.LEADER_EPOCH);
    assert.equal(error.fencingFailure?.current, 2n);
    assert.equal(error.leaderAddress, "c9:9");
    assert.equal(LockgateError.from(error), error);
  });

  test("a connection lost under a call is UNAVAILABLE (retryable), a server's ABORTED stays ABORTED", () => {
    const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
    const lost = LockgateError.from(new ConnectError("read ECONNRESET", Code.Aborted, undefined, undefined, reset));
    assert.equal(lost.code, Code.Unavailable);
    const answered = LockgateError.from(
      new ConnectError("config version moved", Code.Aborted, new Headers({ "grpc-status": "10" }), undefined, reset),
    );
    assert.equal(answered.code, Code.Aborted);
  });
});
