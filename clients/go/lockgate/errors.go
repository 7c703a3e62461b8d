package lockgate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
)

// LeaderMetadataKey is the trailing metadata a follower coordinator sets, on UNAVAILABLE,
// to the leader's address (host:port).
const LeaderMetadataKey = "lockgate-leader"

// FieldViolation is one invalid field of a request or pipeline spec (google.rpc.BadRequest).
type FieldViolation struct {
	// Field is the path of the field in proto field names, e.g. "sink.kafka.topic".
	Field string
	// Description says what is wrong and how to fix it.
	Description string
}

// PreconditionViolation is one unmet precondition (google.rpc.PreconditionFailure), e.g.
// one reason a schema is incompatible.
type PreconditionViolation struct {
	// Type is the kind of precondition, e.g. "COMPATIBILITY".
	Type string
	// Subject is what the precondition is about.
	Subject string
	// Description says how it failed.
	Description string
}

// Error is a failed call to a Lockgate service: the gRPC status and its google.rpc details,
// decoded. Every error the clients of this package return for a failed RPC is an *Error:
//
//	var lerr *lockgate.Error
//	if errors.As(err, &lerr) && lerr.Code == codes.InvalidArgument {
//		for _, v := range lerr.FieldViolations { fmt.Println(v.Field, v.Description) }
//	}
//
// status.Code(err) and status.FromError(err) work on it too (GRPCStatus).
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// Reason is google.rpc.ErrorInfo's reason, e.g. "STALE_FENCING_TOKEN", "NOT_LEADER".
	Reason string
	// Domain is google.rpc.ErrorInfo's domain.
	Domain string
	// Metadata is google.rpc.ErrorInfo's metadata, e.g. the schema registry's
	// "confluent_error_code".
	Metadata map[string]string
	// FieldViolations are the invalid fields (INVALID_ARGUMENT), from google.rpc.BadRequest.
	FieldViolations []FieldViolation
	// PreconditionViolations are the unmet preconditions, from google.rpc.PreconditionFailure.
	PreconditionViolations []PreconditionViolation
	// FencingFailure is set when the call carried a stale fencing token (FAILED_PRECONDITION):
	// the caller is a zombie and must stop acting.
	FencingFailure *lockgatev1.FencingFailure
	// ResourceType and ResourceName name the missing or existing resource (NOT_FOUND,
	// ALREADY_EXISTS), from google.rpc.ResourceInfo.
	ResourceType, ResourceName string
	// RetryDelay is how long the service asked the caller to wait (google.rpc.RetryInfo), 0
	// if it did not say.
	RetryDelay time.Duration
	// LeaderAddress is the leader a follower coordinator pointed to, empty if none.
	LeaderAddress string

	status *status.Status
}

// Error reads "lockgate: CODE: message", followed by the field violations the message does
// not already spell out.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lockgate: %s: %s", e.Code, e.Message)
	for _, v := range e.FieldViolations {
		if !strings.Contains(e.Message, v.Description) {
			fmt.Fprintf(&b, "; %s: %s", v.Field, v.Description)
		}
	}
	return b.String()
}

// GRPCStatus is the status the error was decoded from (for status.Code and status.FromError).
func (e *Error) GRPCStatus() *status.Status { return e.status }

// FieldPaths lists the paths of FieldViolations, in order.
func (e *Error) FieldPaths() []string {
	paths := make([]string, len(e.FieldViolations))
	for i, v := range e.FieldViolations {
		paths[i] = v.Field
	}
	return paths
}

// asError decodes a failed call; trailer is the call's trailing metadata (may be nil). An
// error that is no gRPC status (the client closed) is returned unchanged.
func asError(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	out := &Error{Code: st.Code(), Message: st.Message(), status: st}
	if leaders := trailer.Get(LeaderMetadataKey); len(leaders) > 0 {
		out.LeaderAddress = leaders[0]
	}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			out.Reason, out.Domain, out.Metadata = d.GetReason(), d.GetDomain(), d.GetMetadata()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				out.FieldViolations = append(out.FieldViolations, FieldViolation{v.GetField(), v.GetDescription()})
			}
		case *errdetails.PreconditionFailure:
			for _, v := range d.GetViolations() {
				out.PreconditionViolations = append(out.PreconditionViolations,
					PreconditionViolation{v.GetType(), v.GetSubject(), v.GetDescription()})
			}
		case *errdetails.ResourceInfo:
			out.ResourceType, out.ResourceName = d.GetResourceType(), d.GetResourceName()
		case *errdetails.RetryInfo:
			out.RetryDelay = d.GetRetryDelay().AsDuration()
		case *lockgatev1.FencingFailure:
			out.FencingFailure = d
		}
	}
	if out.LeaderAddress == "" && out.Metadata != nil {
		out.LeaderAddress = out.Metadata["leader_address"]
	}
	return out
}
