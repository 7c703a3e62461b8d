package lockgate

import (
	"context"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
)

// Coordinator is a CoordinatorService client that follows the leader over several replicas.
// Every RPC of the service is a method (the generated lockgatev1.CoordinatorServiceClient).
type Coordinator struct {
	lockgatev1.CoordinatorServiceClient
	// Conn is the leader-following connection the calls go through.
	Conn *Conn
}

// Dial returns a client of the coordinator replicas at addrs (HOST:PORT each, any order;
// one is enough, all are better: calls move on when one is down). It does not wait for a
// connection: the first call connects, within its own context. ctx is not kept.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Coordinator, error) {
	conn, err := dial(ctx, addrs, opts)
	if err != nil {
		return nil, err
	}
	return &Coordinator{CoordinatorServiceClient: lockgatev1.NewCoordinatorServiceClient(conn), Conn: conn}, nil
}

// Close closes the client's connections.
func (c *Coordinator) Close() error { return c.Conn.Close() }

// SchemaRegistry is a SchemaRegistryService client over one or more registry replicas
// (any replica answers every call; UNAVAILABLE moves on to the next).
type SchemaRegistry struct {
	lockgatev1.SchemaRegistryServiceClient
	// Conn is the connection the calls go through.
	Conn *Conn
}

// DialSchemaRegistry returns a client of the schema registry's gRPC service at addrs.
func DialSchemaRegistry(ctx context.Context, addrs []string, opts ...Option) (*SchemaRegistry, error) {
	conn, err := dial(ctx, addrs, opts)
	if err != nil {
		return nil, err
	}
	return &SchemaRegistry{SchemaRegistryServiceClient: lockgatev1.NewSchemaRegistryServiceClient(conn), Conn: conn}, nil
}

// Close closes the client's connections.
func (r *SchemaRegistry) Close() error { return r.Conn.Close() }

// Executor is an ExecutorService client of one executor. Its control RPCs (TriggerCheckpoint,
// TriggerCheckpoints, CommitCheckpoint, AbortCheckpoint) are the coordinator leader's: any
// other caller is refused with a FencingFailure unless it presents the current leader epoch
// and executor generation.
type Executor struct {
	lockgatev1.ExecutorServiceClient
	// Conn is the connection the calls go through (retrying UNAVAILABLE, as while the
	// executor starts).
	Conn *Conn
}

// DialExecutor returns a client of the executor at addr (HOST:PORT).
func DialExecutor(ctx context.Context, addr string, opts ...Option) (*Executor, error) {
	conn, err := dial(ctx, []string{addr}, opts)
	if err != nil {
		return nil, err
	}
	return &Executor{ExecutorServiceClient: lockgatev1.NewExecutorServiceClient(conn), Conn: conn}, nil
}

// Close closes the client's connection.
func (e *Executor) Close() error { return e.Conn.Close() }

// dial checks the addresses and options; connections are made by the first call to each
// address, so ctx only lets a caller that is already cancelled fail early.
func dial(ctx context.Context, addrs []string, opts []Option) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return newConn(addrs, opts)
}
