package lockgate

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// RetryPolicy says how a call that failed with UNAVAILABLE is sent again. A redirect to the
// leader named by a follower is immediate; any other UNAVAILABLE waits a backoff first, then
// goes to the next address.
type RetryPolicy struct {
	// InitialBackoff is the first wait, doubled after each retry up to MaxBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between two attempts.
	MaxBackoff time.Duration
	// MaxAttempts bounds the attempts of a call whose context has no deadline; a call with a
	// deadline is retried until the next wait would pass it. 1 disables retries.
	MaxAttempts int
	// MaxRedirects is how many leader redirects are followed at once, without a wait,
	// before the next backoff (a leader that just died may still be named by followers).
	MaxRedirects int
}

// DefaultRetryPolicy is the policy of a client dialled without WithRetryPolicy: the Python
// client's (100 ms doubling to 2 s, 3 redirects), with 5 attempts for calls without a
// deadline.
var DefaultRetryPolicy = RetryPolicy{
	InitialBackoff: 100 * time.Millisecond,
	MaxBackoff:     2 * time.Second,
	MaxAttempts:    5,
	MaxRedirects:   3,
}

// Option configures Dial, DialSchemaRegistry and DialExecutor.
type Option func(*settings)

type settings struct {
	tls         *tls.Config
	perRPC      []credentials.PerRPCCredentials
	retry       RetryPolicy
	dialOptions []grpc.DialOption
}

func newSettings(opts []Option) (settings, error) {
	s := settings{retry: DefaultRetryPolicy}
	for _, opt := range opts {
		opt(&s)
	}
	if s.retry.MaxAttempts < 1 || s.retry.MaxRedirects < 0 || s.retry.InitialBackoff <= 0 ||
		s.retry.MaxBackoff < s.retry.InitialBackoff {
		return s, errors.New("lockgate: RetryPolicy needs MaxAttempts >= 1, MaxRedirects >= 0 and 0 < InitialBackoff <= MaxBackoff")
	}
	if s.tls == nil {
		for _, c := range s.perRPC {
			if c.RequireTransportSecurity() {
				return s, errors.New("lockgate: these credentials need a TLS connection; add WithTLS(...) (a bearer token is never sent in plaintext)")
			}
		}
	}
	return s, nil
}

// WithTLS makes every connection use TLS with config (nil: the system roots). Without it
// connections are plaintext, as the services serve today.
func WithTLS(config *tls.Config) Option {
	return func(s *settings) {
		if config == nil {
			config = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		s.tls = config
	}
}

// WithBearerToken sends "authorization: Bearer <token>" with every call. It needs WithTLS:
// Dial refuses to send a token in plaintext.
func WithBearerToken(token string) Option {
	return WithPerRPCCredentials(bearerToken(token))
}

// WithPerRPCCredentials attaches credentials (e.g. from google.golang.org/grpc/credentials/oauth)
// to every call.
func WithPerRPCCredentials(creds credentials.PerRPCCredentials) Option {
	return func(s *settings) { s.perRPC = append(s.perRPC, creds) }
}

// WithRetryPolicy replaces DefaultRetryPolicy.
func WithRetryPolicy(policy RetryPolicy) Option {
	return func(s *settings) { s.retry = policy }
}

// WithDialOptions adds grpc-go dial options to every connection (e.g. interceptors for
// tracing), after the package's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(s *settings) { s.dialOptions = append(s.dialOptions, opts...) }
}

type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return true }
