// Package lockgate is the Go client of Lockgate's services: a thin layer over the code
// generated from protos/lockgate/v1 (package lockgatev1) that every caller would otherwise
// write.
//
//   - Dial connects to several coordinator replicas and sends each call to the leader: a
//     follower answers a leader-only call with UNAVAILABLE and the trailing metadata
//     "lockgate-leader: host:port", and the call is sent there at once; an UNAVAILABLE
//     without it (a replica down, no leader elected yet) is retried on the next address
//     after a capped exponential backoff, for as long as the caller's context deadline
//     allows (RetryPolicy).
//   - A request message with a request_id field (every mutating call) gets a new UUID there
//     when the caller left it empty; the same id is sent on every retry of that call, so a
//     retry after a lost answer is recognised by services that deduplicate by it. The
//     caller's message is never modified.
//   - A failed call returns an *Error: its gRPC code and message, and the google.rpc details
//     the services send (BadRequest field violations, PreconditionFailure, ErrorInfo,
//     ResourceInfo, RetryInfo) with Lockgate's FencingFailure, decoded. Use errors.As.
//   - DialSchemaRegistry and DialExecutor give the same behaviour for the schema registry
//     and for one executor.
//
// Connections are plaintext by default; WithTLS and WithBearerToken (or
// WithPerRPCCredentials) are ready for the services' trust-boundary work.
package lockgate
