// The leader-following transport: the TypeScript twin of the Python client's
// LeaderFollowingChannel (common/lockgate/common/grpc_client.py).
//
// A unary call that fails with UNAVAILABLE
// - carrying `lockgate-leader: <address>` (a follower coordinator): goes to that address at
//   once (at most `maxRedirects` times in a row, between two back-offs);
// - without it (connection refused, no leader elected yet, an executor starting): backs off
//   (capped exponential) and goes to the next address, round robin.
// All attempts share the call's deadline (its `timeoutMs`, else `defaultTimeoutMs`); the last
// error surfaces once the next back-off would pass the deadline. Resending after UNAVAILABLE is
// safe: every mutating request carries a `request_id`, filled here once per logical call (a
// UUID, kept across the retries) when the caller left it empty.

import { randomUUID } from "node:crypto";
import {
  type DescMessage,
  type DescMethodStreaming,
  type DescMethodUnary,
  type MessageInitShape,
  type MessageShape,
  ScalarType,
  clone,
  create,
  isMessage,
} from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { Code, type ContextValues, type StreamResponse, type Transport, type UnaryResponse } from "@connectrpc/connect";
import { LockgateError } from "./errors.js";

/** How a call is retried. */
export interface RetryOptions {
  /** First back-off after an UNAVAILABLE without a leader address, in ms (default 100). */
  readonly initialBackoffMs?: number;
  /** Cap of the back-off, which doubles per retry, in ms (default 1000). */
  readonly maxBackoffMs?: number;
  /** Immediate resends to a named leader between two back-offs (default 3). */
  readonly maxRedirects?: number;
  /** Deadline of a call that gives no `timeoutMs`, in ms (default 30000). */
  readonly defaultTimeoutMs?: number;
}

const DEFAULTS: Required<RetryOptions> = {
  initialBackoffMs: 100,
  maxBackoffMs: 1000,
  maxRedirects: 3,
  defaultTimeoutMs: 30_000,
};

/**
 * `input` as a message of `schema` (a copy: the caller's object is never changed) with its
 * `request_id` set to a new UUID if the message has that field and the caller left it empty.
 */
export function withRequestId<I extends DescMessage>(schema: I, input: MessageInitShape<I>): MessageShape<I> {
  const message = isMessage(input, schema) ? clone(schema, input) : create(schema, input);
  const field = schema.fields.find(
    (f) => f.name === "request_id" && f.fieldKind === "scalar" && f.scalar === ScalarType.STRING,
  );
  if (field !== undefined) {
    const reflected = reflect(schema, message);
    if (reflected.get(field) === "") reflected.set(field, randomUUID());
  }
  return message;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A Transport that sends each unary call to the current leader (see the file comment). */
export class LeaderFollowingTransport implements Transport {
  private readonly seeds: readonly string[];
  private readonly connect: (address: string) => Transport;
  private readonly policy: Required<RetryOptions>;
  private readonly transports = new Map<string, Transport>();
  private current: string;

  /**
   * @param addresses host:port of every replica to try, in order (at least one).
   * @param connect   the plain transport to one address (cached per address).
   */
  constructor(addresses: readonly string[], connect: (address: string) => Transport, retry: RetryOptions = {}) {
    const seeds = addresses.map((a) => a.trim()).filter((a) => a !== "");
    if (seeds.length === 0) throw new Error("no address given; pass at least one HOST:PORT");
    for (const seed of seeds) {
      if (!/^[^:\s]+:\d+$/.test(seed) && !/^\[[^\]]+\]:\d+$/.test(seed)) {
        throw new Error(`address ${JSON.stringify(seed)} is not HOST:PORT, e.g. 127.0.0.1:7070`);
      }
    }
    const policy = { ...DEFAULTS, ...retry };
    if (policy.initialBackoffMs <= 0 || policy.maxBackoffMs < policy.initialBackoffMs || policy.maxRedirects < 0) {
      throw new Error("retry: need initialBackoffMs > 0, maxBackoffMs >= initialBackoffMs, maxRedirects >= 0");
    }
    this.seeds = seeds;
    this.connect = connect;
    this.policy = policy;
    this.current = seeds[0]!;
  }

  /** The address calls go to now: the last known leader, or a seed. */
  get currentAddress(): string {
    return this.current;
  }

  private transportFor(address: string): Transport {
    let transport = this.transports.get(address);
    if (transport === undefined) {
      transport = this.connect(address);
      this.transports.set(address, transport);
    }
    return transport;
  }

  private follow(from: string, leader: string): void {
    if (this.current === from) this.current = leader;
  }

  /** After a failure at `from`: the next seed; from a redirect target, the first seed. */
  private nextSeed(from: string): void {
    if (this.current !== from) return; // another call moved on already
    const index = this.seeds.indexOf(from);
    this.current = this.seeds[index < 0 ? 0 : (index + 1) % this.seeds.length]!;
  }

  /**
   * Calls one replica at a time: a redirect is followed at once, UNAVAILABLE (and a stream
   * reset under the call, `resetUnderCall`) is retried with back-off on the next replica, with
   * the same request_id, until the deadline; the caller's own abort is never retried.
   */
  async unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: Parameters<Transport["unary"]>[3],
    input: MessageInitShape<I>,
    contextValues?: ContextValues,
  ): Promise<UnaryResponse<I, O>> {
    const request = withRequestId(method.input, input);
    const deadline = performance.now() + (timeoutMs ?? this.policy.defaultTimeoutMs);
    let backoff = this.policy.initialBackoffMs;
    let redirects = 0;
    for (;;) {
      const address = this.current;
      const remaining = Math.max(1, Math.round(deadline - performance.now()));
      try {
        return await this.transportFor(address).unary(method, signal, remaining, header, request, contextValues);
      } catch (cause) {
        const error = LockgateError.from(cause);
        if (signal?.aborted || !(error.code === Code.Unavailable || resetUnderCall(error))) throw error;
        const leader = error.leaderAddress;
        if (leader !== undefined && leader !== address && redirects < this.policy.maxRedirects) {
          redirects += 1;
          this.follow(address, leader);
          continue;
        }
        const delay = Math.min(backoff, this.policy.maxBackoffMs);
        if (performance.now() + delay >= deadline) throw error;
        // Back-off between two attempts of a failed call, not synchronisation.
        await sleep(delay, signal).catch((reason: unknown) => {
          throw LockgateError.from(reason);
        });
        backoff *= 2;
        redirects = 0;
        this.nextSeed(address);
      }
    }
  }

  /** Lockgate's services have no streaming RPC; a stream goes to the current address as is. */
  stream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodStreaming<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: Parameters<Transport["unary"]>[3],
    input: AsyncIterable<MessageInitShape<I>>,
    contextValues?: ContextValues,
  ): Promise<StreamResponse<I, O>> {
    return this.transportFor(this.current).stream(method, signal, timeoutMs, header, input, contextValues);
  }
}

/**
 * A call whose HTTP/2 stream was closed with CANCEL without a gRPC status while the caller had
 * not aborted it: its connection died under it (Node closes a dead session's open streams
 * with CANCEL), as when the leader is SIGKILLed. Retried as UNAVAILABLE; the request_id makes
 * the retry of a call the server did process harmless.
 */
function resetUnderCall(error: LockgateError): boolean {
  return error.code === Code.Canceled && !error.responseMetadata.has("grpc-status");
}
