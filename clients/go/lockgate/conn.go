package lockgate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Conn is a grpc.ClientConnInterface over several addresses of one service that sends each
// call where it will be answered: the leader a follower names in its "lockgate-leader"
// trailing metadata, else the next address, retrying UNAVAILABLE under its RetryPolicy. It
// fills empty request_id fields (see the package documentation) and returns *Error for
// failed calls. Any generated client (lockgatev1.New...Client) works over it. Safe for
// concurrent use.
type Conn struct {
	seeds    []string
	settings settings

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	current string
	closed  bool
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// errClosed is returned by calls on a closed Conn.
var errClosed = errors.New("lockgate: the connection is closed")

func newConn(addrs []string, opts []Option) (*Conn, error) {
	var seeds []string
	for _, addr := range addrs {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("lockgate: address %q is not HOST:PORT: %w", addr, err)
		}
		seeds = append(seeds, addr)
	}
	if len(seeds) == 0 {
		return nil, errors.New("lockgate: no address given; pass at least one HOST:PORT, e.g. 127.0.0.1:7070")
	}
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	return &Conn{seeds: seeds, settings: s, conns: map[string]*grpc.ClientConn{}, current: seeds[0]}, nil
}

// CurrentAddress is where calls go now: the last leader learned, or a seed address.
func (c *Conn) CurrentAddress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// Close closes every underlying connection; later calls fail.
func (c *Conn) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns, c.closed = nil, true
	c.mu.Unlock()
	var errs []error
	for _, cc := range conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

func (c *Conn) dialOptions() []grpc.DialOption {
	transport := insecure.NewCredentials()
	if c.settings.tls != nil {
		transport = credentials.NewTLS(c.settings.tls)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		// Retries are this Conn's: grpc-go's transparent retries would resend to the same
		// follower.
		grpc.WithDisableRetry(),
		// Notice a dead peer in seconds; the services accept pings this frequent.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// Reconnect quickly after a replica restarts, not after grpc-go's 120 s cap.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	}
	for _, creds := range c.settings.perRPC {
		opts = append(opts, grpc.WithPerRPCCredentials(creds))
	}
	return append(opts, c.settings.dialOptions...)
}

// connTo returns the (cached) connection to address.
func (c *Conn) connTo(address string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if cc, ok := c.conns[address]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(address, c.dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("lockgate: cannot connect to %s: %w", address, err)
	}
	c.conns[address] = cc
	return cc, nil
}

// follow moves calls to leader, unless another call already moved them from address.
func (c *Conn) follow(address, leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == address {
		c.current = leader
	}
}

// nextSeed moves calls on from an address that failed: to the next seed (round robin), or,
// from a leader learned by redirect that stopped answering, to the first seed.
func (c *Conn) nextSeed(address string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != address {
		return // another call already moved on
	}
	c.current = c.seeds[0]
	for i, seed := range c.seeds {
		if seed == address {
			c.current = c.seeds[(i+1)%len(c.seeds)]
		}
	}
}

// Invoke sends a unary call under the leader-following and retry policy (grpc.ClientConnInterface).
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	args = withRequestID(args)
	policy := c.settings.retry
	wait := policy.InitialBackoff
	attempts, redirects := 0, 0
	for {
		address := c.CurrentAddress()
		cc, err := c.connTo(address)
		if err != nil {
			return err
		}
		var trailer metadata.MD
		err = cc.Invoke(ctx, method, args, reply, slices.Concat(opts, []grpc.CallOption{grpc.Trailer(&trailer)})...)
		if err == nil {
			return nil
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return asError(err, trailer)
		}
		if leaders := trailer.Get(LeaderMetadataKey); len(leaders) > 0 && leaders[0] != address {
			c.follow(address, leaders[0])
			if redirects < policy.MaxRedirects {
				redirects++
				continue
			}
		} else {
			c.nextSeed(address)
		}
		attempts++
		deadline, hasDeadline := ctx.Deadline()
		if !hasDeadline && attempts >= policy.MaxAttempts {
			return asError(err, trailer)
		}
		delay := wait
		if hasDeadline && time.Now().Add(delay).After(deadline) {
			return asError(err, trailer)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return asError(err, trailer)
		case <-timer.C:
		}
		wait = min(2*wait, policy.MaxBackoff)
		redirects = 0
	}
}

// NewStream opens a stream to the current address, without retry (Lockgate's services have
// no streaming RPC today).
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cc, err := c.connTo(c.CurrentAddress())
	if err != nil {
		return nil, err
	}
	stream, err := cc.NewStream(ctx, desc, method, opts...)
	return stream, asError(err, nil)
}

// withRequestID returns args with a new UUID in its string field request_id when it has one
// and the caller left it empty: a copy, so the caller's message stays as it was and each
// logical call gets its own id, kept across the retries of that call.
func withRequestID(args any) any {
	message, ok := args.(proto.Message)
	if !ok {
		return args
	}
	field := message.ProtoReflect().Descriptor().Fields().ByName("request_id")
	if field == nil || field.Kind() != protoreflect.StringKind || field.IsList() {
		return args
	}
	if message.ProtoReflect().Get(field).String() != "" {
		return args
	}
	filled := proto.Clone(message)
	filled.ProtoReflect().Set(field, protoreflect.ValueOfString(uuid.NewString()))
	return filled
}
