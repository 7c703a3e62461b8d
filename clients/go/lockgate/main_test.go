package lockgate_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/internal/testbed"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

// The integration tests share one testbed (starting one takes tens of seconds); each test
// uses its own pipeline names and schema subjects. Source topics are created once here.
var tb *testbed.Testbed

const (
	topicIn  = "go-in"  // 3 partitions
	topicOut = "go-out" // 1 partition
)

// callTimeout is each RPC's deadline in the tests: long enough for a leader failover.
const callTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // the integration tests skip themselves
	}
	home, err := os.MkdirTemp("", "lockgate-go-testbed-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	began := time.Now()
	tb, err = testbed.Start(home)
	if err != nil {
		fmt.Fprintln(os.Stderr, "go test: cannot start the testbed:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = tb.CreateTopics(ctx, map[string]int{topicIn: 3, topicOut: 1})
	cancel()
	fmt.Fprintf(os.Stderr, "testbed ready in %s (home %s)\n", time.Since(began).Round(time.Millisecond), home)
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "go test: cannot create the test topics:", err)
	} else {
		code = m.Run()
	}
	// A whole run (no -run filter) must have called every RPC of every service.
	if code == 0 && flag.Lookup("test.run").Value.String() == "" {
		if missing := uncalledRPCs(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "go test: no integration test calls %s\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	if stopErr := tb.Stop(); stopErr != nil {
		fmt.Fprintln(os.Stderr, "go test: stopping the testbed:", stopErr)
	}
	if code == 0 {
		_ = os.RemoveAll(home)
	} else {
		fmt.Fprintln(os.Stderr, "testbed logs kept in", home+"/log")
	}
	os.Exit(code)
}

// calledRPCs holds the full method names the tests called on the testbed's services.
var calledRPCs sync.Map

// recorded is the option of every test client: it notes each RPC sent to the testbed.
var recorded = lockgate.WithDialOptions(grpc.WithChainUnaryInterceptor(
	func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tb != nil {
			addresses := append(append([]string{tb.RegistryGRPC}, tb.Coordinators...), tb.Executors...)
			if slices.ContainsFunc(addresses, func(a string) bool { return strings.HasSuffix(cc.Target(), a) }) {
				calledRPCs.Store(method, true)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}))

// uncalledRPCs lists the RPCs of the three services that no test called on the testbed.
func uncalledRPCs() []string {
	var missing []string
	for _, file := range []protoreflect.FileDescriptor{
		lockgatev1.File_lockgate_v1_coordinator_proto,
		lockgatev1.File_lockgate_v1_executor_proto,
		lockgatev1.File_lockgate_v1_schema_registry_proto,
	} {
		for i := range file.Services().Len() {
			service := file.Services().Get(i)
			for j := range service.Methods().Len() {
				method := fmt.Sprintf("/%s/%s", service.FullName(), service.Methods().Get(j).Name())
				if _, called := calledRPCs.Load(method); !called {
					missing = append(missing, method)
				}
			}
		}
	}
	return missing
}

// needTestbed skips a test under -short, where no testbed runs.
func needTestbed(t *testing.T) {
	t.Helper()
	if tb == nil {
		t.Skip("integration test: needs the testbed (not under -short)")
	}
}

// callCtx is a context with callTimeout, cancelled at the end of the test.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls check every 100 ms until it returns true, failing the test after timeout
// with what and the last error check returned.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		done, err := check()
		if done {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last error: %v)", what, timeout, lastErr)
		}
		time.Sleep(100 * time.Millisecond) // polling interval of a condition, not a sync point
	}
}

// dialCoordinators is a leader-following client of every coordinator of the testbed.
func dialCoordinators(t *testing.T) *lockgate.Coordinator {
	t.Helper()
	return dialCoordinatorAt(t, tb.Coordinators...)
}

// dialCoordinatorAt is a client of the given replicas only.
func dialCoordinatorAt(t *testing.T, addrs ...string) *lockgate.Coordinator {
	t.Helper()
	client, err := lockgate.Dial(context.Background(), addrs, recorded)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// follower is a client of one live replica that is not the leader now: its answers to read
// RPCs come from SQL, not from the replica the mutating calls went to.
func follower(t *testing.T, coord *lockgate.Coordinator) *lockgate.Coordinator {
	t.Helper()
	info, err := coord.GetClusterInfo(callCtx(t), &lockgatev1.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, member := range info.GetCoordinators() {
		if member.GetIsLeader() || member.GetState() != lockgatev1.CoordinatorState_COORDINATOR_STATE_ALIVE {
			continue
		}
		// A replica killed by another test may still be listed ALIVE for 3 lease periods.
		client := dialCoordinatorAt(t, member.GetAddress())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.GetClusterInfo(ctx, &lockgatev1.GetClusterInfoRequest{})
		cancel()
		if err == nil {
			return client
		}
	}
	t.Fatalf("no live follower in %v", info.GetCoordinators())
	return nil
}

// copySpec is a pipeline copying topicIn to topicOut with short checkpoints.
func copySpec(name string, tasks int32) *lockgatev1.PipelineSpec {
	return &lockgatev1.PipelineSpec{
		Name: name,
		Source: &lockgatev1.SourceSpec{Source: &lockgatev1.SourceSpec_Kafka{Kafka: &lockgatev1.KafkaSourceSpec{
			BootstrapServers: tb.Kafka, Topics: []string{topicIn},
		}}},
		Sink: &lockgatev1.SinkSpec{Sink: &lockgatev1.SinkSpec_Kafka{Kafka: &lockgatev1.KafkaSinkSpec{
			BootstrapServers: tb.Kafka, Topic: topicOut,
		}}},
		Checkpoint: &lockgatev1.CheckpointSpec{IntervalMs: 300, TimeoutMs: 10_000},
		TasksMax:   tasks,
	}
}
