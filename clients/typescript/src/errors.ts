// LockgateError: a failed call with the google.rpc details the services send, decoded from
// the `grpc-status-details-bin` trailer (as the Python client's `error_details` does).

import { Code, ConnectError } from "@connectrpc/connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  PreconditionFailureSchema,
  ResourceInfoSchema,
  RetryInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";
import { type FencingFailure, FencingFailureSchema } from "./gen/lockgate/v1/common_pb.js";

/** Trailing metadata key a follower coordinator sets to the leader's address on UNAVAILABLE. */
export const LEADER_METADATA_KEY = "lockgate-leader";

/** One invalid field of a request (google.rpc.BadRequest.FieldViolation). */
export interface BadRequestViolation {
  /** Path of the field in proto field names, e.g. "sink.kafka.topic". */
  readonly field: string;
  /** What is wrong with it and how to fix it. */
  readonly description: string;
}

/** One failed precondition (google.rpc.PreconditionFailure.Violation). */
export interface PreconditionViolation {
  /** Kind of precondition, e.g. "INCOMPATIBLE". */
  readonly type: string;
  /** What it is about, e.g. a subject. */
  readonly subject: string;
  /** What failed, in words. */
  readonly description: string;
}

/**
 * Node error codes of a connection that broke under a call (the peer died or closed it). gRPC
 * reports these as UNAVAILABLE, which is retryable; Connect's Node transport calls some of them
 * ABORTED (its meaning for a server whose client hung up), so they are re-classified here.
 */
const CONNECTION_LOST = new Set([
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_STREAM_DESTROYED",
]);

/** True if `error` carries no gRPC status and was caused by a lost connection. */
function connectionLost(error: ConnectError): boolean {
  if (error.metadata.has("grpc-status")) return false;
  for (let cause: unknown = error.cause; cause instanceof Error; cause = cause.cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (code !== undefined && CONNECTION_LOST.has(code)) return true;
  }
  return false;
}

/** gRPC's name of a status code, e.g. "INVALID_ARGUMENT" for Code.InvalidArgument. */
export function grpcCodeName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  const name = Code[code] as string | undefined;
  return name === undefined ? `CODE_${code}` : name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/**
 * A Lockgate call that failed. Every client of this package throws only this type.
 *
 * `code` is the gRPC status code (Connect's `Code` has the same numbers); the other fields
 * are the status details: `fieldViolations` from google.rpc.BadRequest (INVALID_ARGUMENT),
 * `fencingFailure` from lockgate.v1.FencingFailure (FAILED_PRECONDITION for a stale token),
 * `reason`/`metadata` from google.rpc.ErrorInfo, and so on.
 */
export class LockgateError extends Error {
  override readonly name = "LockgateError";
  /** gRPC status code. */
  readonly code: Code;
  /** The status code's gRPC name, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** The status message as the server sent it. */
  readonly statusMessage: string;
  /** google.rpc.ErrorInfo.reason, e.g. "STALE_FENCING_TOKEN" or "NOT_LEADER". */
  readonly reason: string | undefined;
  /** google.rpc.ErrorInfo.domain. */
  readonly domain: string | undefined;
  /** google.rpc.ErrorInfo.metadata (e.g. the registry's `confluent_error_code`). */
  readonly metadata: Readonly<Record<string, string>>;
  /** google.rpc.BadRequest's field violations, in the order sent. */
  readonly fieldViolations: readonly BadRequestViolation[];
  /** google.rpc.PreconditionFailure's violations. */
  readonly preconditionViolations: readonly PreconditionViolation[];
  /** The lockgate.v1.FencingFailure detail of a refused stale token. */
  readonly fencingFailure: FencingFailure | undefined;
  /** google.rpc.ResourceInfo (NOT_FOUND, ALREADY_EXISTS). */
  readonly resourceType: string | undefined;
  readonly resourceName: string | undefined;
  /** google.rpc.RetryInfo's delay, in milliseconds. */
  readonly retryAfterMs: number | undefined;
  /** The leader's address a follower named (`lockgate-leader` trailer). */
  readonly leaderAddress: string | undefined;
  /** Response headers and trailers of the failed call. */
  readonly responseMetadata: Headers;

  constructor(error: ConnectError) {
    const code = connectionLost(error) ? Code.Unavailable : error.code;
    const codeName = grpcCodeName(code);
    super(`${codeName}: ${error.rawMessage}`, { cause: error });
    this.code = code;
    this.codeName = codeName;
    this.statusMessage = error.rawMessage;
    this.responseMetadata = error.metadata;
    const info = error.findDetails(ErrorInfoSchema)[0];
    this.reason = info?.reason || undefined;
    this.domain = info?.domain || undefined;
    this.metadata = Object.freeze({ ...(info?.metadata ?? {}) });
    this.fieldViolations = Object.freeze(
      error
        .findDetails(BadRequestSchema)
        .flatMap((b) => b.fieldViolations.map((v) => ({ field: v.field, description: v.description }))),
    );
    this.preconditionViolations = Object.freeze(
      error
        .findDetails(PreconditionFailureSchema)
        .flatMap((p) => p.violations.map((v) => ({ type: v.type, subject: v.subject, description: v.description }))),
    );
    this.fencingFailure = error.findDetails(FencingFailureSchema)[0];
    const resource = error.findDetails(ResourceInfoSchema)[0];
    this.resourceType = resource?.resourceType || undefined;
    this.resourceName = resource?.resourceName || undefined;
    const delay = error.findDetails(RetryInfoSchema)[0]?.retryDelay;
    this.retryAfterMs = delay ? Number(delay.seconds) * 1000 + delay.nanos / 1e6 : undefined;
    this.leaderAddress = error.metadata.get(LEADER_METADATA_KEY) ?? (this.metadata["leader_address"] || undefined);
  }

  /** `err` as a LockgateError: a ConnectError decoded, a lost connection as UNAVAILABLE, anything
   * else as Connect classifies it. */
  static from(err: unknown): LockgateError {
    return err instanceof LockgateError ? err : new LockgateError(ConnectError.from(err));
  }
}
