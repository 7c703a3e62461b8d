// @lockgate/client: Lockgate's gRPC services from TypeScript.
//
// - createCoordinatorClient / createSchemaRegistryClient / createExecutorClient (clients.ts)
// - LockgateError, the one error type every call throws, with the google.rpc details (errors.ts)
// - LeaderFollowingTransport, the retry and redirect policy, for custom transports (transport.ts)
// - every generated message, enum and service of lockgate.v1 (gen/lockgate/v1)

export * from "./clients.js";
export * from "./errors.js";
export { LeaderFollowingTransport, type RetryOptions, withRequestId } from "./transport.js";
export { Code } from "@connectrpc/connect";
export { create, toJson, fromJson, type MessageInitShape } from "@bufbuild/protobuf";
export * from "./gen/lockgate/v1/common_pb.js";
export * from "./gen/lockgate/v1/coordinator_pb.js";
export * from "./gen/lockgate/v1/executor_pb.js";
export * from "./gen/lockgate/v1/schema_registry_pb.js";
