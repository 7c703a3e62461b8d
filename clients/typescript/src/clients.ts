// The three clients: coordinator (several replicas, follows the leader), schema registry
// (any replica) and executor (one address), each a Connect client over gRPC on HTTP/2 with
// the retry policy of transport.ts, TLS when asked and a bearer token per call.

import type { DescService } from "@bufbuild/protobuf";
import { type Client, type Interceptor, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { CoordinatorService } from "./gen/lockgate/v1/coordinator_pb.js";
import { ExecutorService } from "./gen/lockgate/v1/executor_pb.js";
import { SchemaRegistryService } from "./gen/lockgate/v1/schema_registry_pb.js";
import { LeaderFollowingTransport, type RetryOptions } from "./transport.js";

/** TLS to the services; PEM strings or buffers as Node's `tls` takes them. */
export interface TlsOptions {
  /** Certificates to trust instead of Node's default CAs. */
  readonly ca?: string | Buffer;
  /** Client certificate, for mutual TLS. */
  readonly cert?: string | Buffer;
  /** Key of the client certificate. */
  readonly key?: string | Buffer;
  /** Name to check the server certificate against, if not the address's host. */
  readonly serverName?: string;
}

/** A bearer token, or a function giving the current one (called on every call). */
export type BearerToken = string | (() => string | Promise<string>);

/** How a client connects; every field optional. */
export interface ConnectionOptions {
  /** TLS settings; absent means plaintext HTTP/2 (the services' only mode until the
   * trust-boundary work lands). */
  readonly tls?: TlsOptions;
  /** Sent as `authorization: Bearer <token>` on every call; needs `tls`. */
  readonly bearerToken?: BearerToken;
  /** Back-off, redirects and the default deadline (transport.ts). */
  readonly retry?: RetryOptions;
  /** Extra Connect interceptors, run on every attempt. */
  readonly interceptors?: readonly Interceptor[];
}

/** A generated-method client plus `close()`, which drops its HTTP/2 connections. */
export type LockgateClient<S extends DescService> = Client<S> & {
  /** The address calls go to now (the leader, for a coordinator client). */
  readonly currentAddress: () => string;
  /** Close every connection; the client is not usable afterwards. */
  readonly close: () => void;
};

export type CoordinatorClient = LockgateClient<typeof CoordinatorService>;
export type SchemaRegistryClient = LockgateClient<typeof SchemaRegistryService>;
export type ExecutorClient = LockgateClient<typeof ExecutorService>;

function bearerInterceptor(token: BearerToken): Interceptor {
  return (next) => async (request) => {
    const value = typeof token === "string" ? token : await token();
    request.header.set("authorization", `Bearer ${value}`);
    return next(request);
  };
}

function build<S extends DescService>(
  service: S,
  addresses: string | readonly string[],
  options: ConnectionOptions,
): LockgateClient<S> {
  if (options.bearerToken !== undefined && options.tls === undefined) {
    throw new Error("bearerToken needs tls: a token sent in plaintext can be read on the wire");
  }
  const scheme = options.tls === undefined ? "http" : "https";
  const interceptors = [...(options.interceptors ?? [])];
  if (options.bearerToken !== undefined) interceptors.push(bearerInterceptor(options.bearerToken));
  const tls = options.tls;
  const nodeOptions =
    tls === undefined
      ? {}
      : {
          ...(tls.ca !== undefined && { ca: tls.ca }),
          ...(tls.cert !== undefined && { cert: tls.cert }),
          ...(tls.key !== undefined && { key: tls.key }),
          ...(tls.serverName !== undefined && { servername: tls.serverName }),
        };
  const sessions: Http2SessionManager[] = [];
  const transport = new LeaderFollowingTransport(
    typeof addresses === "string" ? addresses.split(",") : addresses,
    (address) => {
      const baseUrl = `${scheme}://${address}`;
      // Ping a connection with calls open every 30 s and drop it after 10 s without an answer
      // (the Python client's keepalive), so a dead peer is noticed in seconds; a connection idle
      // for longer is pinged before its next call.
      const ping = { pingIntervalMs: 30_000, pingTimeoutMs: 10_000, pingIdleConnection: false };
      const sessionManager = new Http2SessionManager(baseUrl, ping, nodeOptions);
      sessions.push(sessionManager);
      return createGrpcTransport({ baseUrl, sessionManager, interceptors });
    },
    options.retry,
  );
  const client = createClient(service, transport);
  return Object.assign(client, {
    currentAddress: () => transport.currentAddress,
    close: () => {
      for (const session of sessions.splice(0)) session.abort();
    },
  });
}

/**
 * A CoordinatorService client over several replicas (an array, or "host:port,host:port"):
 * leader-only calls follow the `lockgate-leader` redirect, UNAVAILABLE is retried within the
 * call's deadline, mutating calls get a `request_id`. Errors are LockgateError.
 */
export function createCoordinatorClient(
  addresses: string | readonly string[],
  options: ConnectionOptions = {},
): CoordinatorClient {
  return build(CoordinatorService, addresses, options);
}

/** A SchemaRegistryService client over one or several registry replicas (any answers). */
export function createSchemaRegistryClient(
  addresses: string | readonly string[],
  options: ConnectionOptions = {},
): SchemaRegistryClient {
  return build(SchemaRegistryService, addresses, options);
}

/** An ExecutorService client to one executor (UNAVAILABLE retried there within the deadline). */
export function createExecutorClient(address: string, options: ConnectionOptions = {}): ExecutorClient {
  if (address.includes(",")) throw new Error("an executor client takes one HOST:PORT");
  return build(ExecutorService, [address], options);
}
