package lockgate_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

// executorRegistration is what the coordinators know of executor id.
func executorRegistration(t *testing.T, coord *lockgate.Coordinator, id string) (*lockgatev1.Executor, *lockgatev1.LeaderEpoch) {
	t.Helper()
	info, err := coord.GetClusterInfo(callCtx(t), &lockgatev1.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo: %v", err)
	}
	for _, executor := range info.GetExecutors() {
		if executor.GetExecutorId() == id && executor.GetState() == lockgatev1.ExecutorState_EXECUTOR_STATE_ALIVE {
			return executor, info.GetLeaderEpoch()
		}
	}
	t.Fatalf("GetClusterInfo lists no live executor %s: %v", id, info.GetExecutors())
	return nil, nil
}

// expectFencingFailure fails the test unless err is FAILED_PRECONDITION with a
// FencingFailure about token, subject, presented and current.
func expectFencingFailure(t *testing.T, rpc string, err error, want *lockgatev1.FencingFailure) {
	t.Helper()
	var lerr *lockgate.Error
	if !errors.As(err, &lerr) || lerr.Code != codes.FailedPrecondition || lerr.FencingFailure == nil {
		t.Fatalf("%s: %v, want FAILED_PRECONDITION with a FencingFailure", rpc, err)
	}
	got := lerr.FencingFailure
	if got.GetToken() != want.GetToken() || got.GetSubject() != want.GetSubject() ||
		got.GetPresented() != want.GetPresented() || got.GetCurrent() != want.GetCurrent() {
		t.Fatalf("%s: FencingFailure %v, want %v", rpc, got, want)
	}
}

// TestExecutorService calls every ExecutorService RPC of a real executor. Its identity
// matches what the coordinators list; its control RPCs, sent by a client that is not the
// registration's leader (a generation the executor does not have), are refused with a
// FencingFailure naming the stale token, and change nothing.
func TestExecutorService(t *testing.T) {
	needTestbed(t)
	coord := dialCoordinators(t)
	executor, err := lockgate.DialExecutor(context.Background(), tb.Executors[0], recorded)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = executor.Close() })

	status, err := executor.GetExecutorStatus(callCtx(t), &lockgatev1.GetExecutorStatusRequest{})
	if err != nil {
		t.Fatalf("GetExecutorStatus: %v", err)
	}
	registration, epoch := executorRegistration(t, coord, status.GetExecutorId())
	if status.GetExecutorGeneration() != registration.GetExecutorGeneration() || registration.GetAddress() != tb.Executors[0] {
		t.Fatalf("the executor says %s generation %d; the coordinators list %v", status.GetExecutorId(), status.GetExecutorGeneration(), registration)
	}

	// The current leader epoch (public through GetClusterInfo) with a registration that
	// does not exist: refused for the executor generation.
	id, stale := status.GetExecutorId(), status.GetExecutorGeneration()+1
	want := &lockgatev1.FencingFailure{
		Token: lockgatev1.FencingToken_FENCING_TOKEN_EXECUTOR_GENERATION, Subject: id,
		Presented: stale, Current: status.GetExecutorGeneration(),
	}
	_, err = executor.TriggerCheckpoint(callCtx(t), &lockgatev1.TriggerCheckpointRequest{
		LeaderEpoch: epoch, ExecutorId: id, ExecutorGeneration: stale, PipelineName: "go-none", CheckpointId: 1, ConfigVersion: 1,
		Tasks: []*lockgatev1.CheckpointTask{{TaskId: &lockgatev1.TaskId{PipelineName: "go-none"}, TaskGeneration: 1}}, TimeoutMs: 1000,
	})
	expectFencingFailure(t, "TriggerCheckpoint", err, want)
	_, err = executor.TriggerCheckpoints(callCtx(t), &lockgatev1.TriggerCheckpointsRequest{
		LeaderEpoch: epoch, ExecutorId: id, ExecutorGeneration: stale,
		Triggers: []*lockgatev1.TriggerCheckpointRequest{{
			PipelineName: "go-none", CheckpointId: 1, ConfigVersion: 1, TimeoutMs: 1000,
			Tasks: []*lockgatev1.CheckpointTask{{TaskId: &lockgatev1.TaskId{PipelineName: "go-none"}, TaskGeneration: 1, TransactionalIdPrefix: "go-none"}},
		}},
	})
	expectFencingFailure(t, "TriggerCheckpoints", err, want)
	_, err = executor.CommitCheckpoint(callCtx(t), &lockgatev1.CommitCheckpointRequest{
		LeaderEpoch: epoch, ExecutorId: id, ExecutorGeneration: stale, PipelineName: "go-none", CheckpointId: 1,
	})
	expectFencingFailure(t, "CommitCheckpoint", err, want)
	_, err = executor.AbortCheckpoint(callCtx(t), &lockgatev1.AbortCheckpointRequest{
		LeaderEpoch: epoch, ExecutorId: id, ExecutorGeneration: stale, PipelineName: "go-none", CheckpointId: 1, Reason: "go test",
	})
	expectFencingFailure(t, "AbortCheckpoint", err, want)
	_, err = executor.NotifyAssignment(callCtx(t), &lockgatev1.NotifyAssignmentRequest{
		LeaderEpoch: epoch, ExecutorId: id, ExecutorGeneration: stale,
	})
	expectFencingFailure(t, "NotifyAssignment", err, want)

	after, err := executor.GetExecutorStatus(callCtx(t), &lockgatev1.GetExecutorStatusRequest{LeaderEpoch: epoch})
	if err != nil || after.GetExecutorGeneration() != status.GetExecutorGeneration() ||
		after.GetHighestLeaderEpochSeen().GetEpoch() != status.GetHighestLeaderEpochSeen().GetEpoch() {
		t.Fatalf("GetExecutorStatus after the refused calls: %v, %v; before %v", after, err, status)
	}
}
