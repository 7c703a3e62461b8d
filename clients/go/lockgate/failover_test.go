package lockgate_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

// TestLeaderFailover SIGKILLs the coordinator leader under a loop of leader-only calls
// (pause, resume, pause, ...): every call succeeds within its deadline, the later ones on
// the new leader. Then the old leader's epoch is refused by an executor, as a zombie
// leader's calls would be.
func TestLeaderFailover(t *testing.T) {
	needTestbed(t)
	coord := dialCoordinators(t)
	const name = "go-failover"
	if _, err := coord.CreatePipeline(callCtx(t), &lockgatev1.CreatePipelineRequest{Spec: copySpec(name, 1)}); err != nil {
		t.Fatalf("CreatePipeline: %v", err)
	}
	before, err := coord.GetClusterInfo(callCtx(t), &lockgatev1.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	oldLeader, oldEpoch := before.GetLeaderAddress(), before.GetLeaderEpoch()
	if tb.PID(oldLeader) == 0 {
		t.Fatalf("the leader %s is none of the testbed's processes %v", oldLeader, tb.Processes)
	}

	const callsBeforeKill, callsAfterNewLeader = 3, 5
	deadline := time.Now().Add(90 * time.Second)
	var killedAt time.Time
	var newEpoch *lockgatev1.LeaderEpoch
	afterNewLeader := 0
	var slowest time.Duration
	for call := 0; afterNewLeader < callsAfterNewLeader; call++ {
		if time.Now().After(deadline) {
			t.Fatalf("no new leader took %d calls within 90 s of the start (epoch before: %v)", callsAfterNewLeader, oldEpoch)
		}
		if call == callsBeforeKill {
			if err := tb.Kill(oldLeader); err != nil {
				t.Fatal(err)
			}
			killedAt = time.Now()
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		var pipeline *lockgatev1.Pipeline
		if call%2 == 0 {
			var response *lockgatev1.PausePipelineResponse
			response, err = coord.PausePipeline(ctx, &lockgatev1.PausePipelineRequest{Name: name})
			pipeline = response.GetPipeline()
		} else {
			var response *lockgatev1.ResumePipelineResponse
			response, err = coord.ResumePipeline(ctx, &lockgatev1.ResumePipelineRequest{Name: name})
			pipeline = response.GetPipeline()
		}
		cancel()
		if err != nil {
			t.Fatalf("call %d (killed the leader before call %d) failed after %s: %v", call, callsBeforeKill, time.Since(began), err)
		}
		if pipeline.GetName() != name {
			t.Fatalf("call %d answered %v", call, pipeline)
		}
		slowest = max(slowest, time.Since(began))
		if killedAt.IsZero() {
			continue
		}
		if newEpoch != nil {
			afterNewLeader++
			continue
		}
		info, err := coord.GetClusterInfo(callCtx(t), &lockgatev1.GetClusterInfoRequest{})
		if err != nil {
			t.Fatalf("GetClusterInfo after the kill: %v", err)
		}
		if info.GetLeaderEpoch().GetEpoch() > oldEpoch.GetEpoch() && info.GetLeaderAddress() != oldLeader && info.GetLeaderAddress() != "" {
			newEpoch = info.GetLeaderEpoch()
			t.Logf("new leader %s (epoch %d) %s after the kill of %s; slowest call so far %s",
				info.GetLeaderAddress(), newEpoch.GetEpoch(), time.Since(killedAt).Round(time.Millisecond), oldLeader, slowest.Round(time.Millisecond))
		}
	}
	if got := coord.Conn.CurrentAddress(); got == oldLeader {
		t.Fatalf("the client still sends calls to the killed leader %s", got)
	}

	// A zombie of the old leader: its epoch is refused once the executor has heard of the
	// new one (from the new leader's heartbeat answers).
	executor, err := lockgate.DialExecutor(context.Background(), tb.Executors[0], recorded)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = executor.Close() })
	status, err := executor.GetExecutorStatus(callCtx(t), &lockgatev1.GetExecutorStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the executor refuses the old leader's epoch", func() (bool, error) {
		_, err := executor.AbortCheckpoint(callCtx(t), &lockgatev1.AbortCheckpointRequest{
			LeaderEpoch: oldEpoch, ExecutorId: status.GetExecutorId(), ExecutorGeneration: status.GetExecutorGeneration(),
			PipelineName: "go-none", CheckpointId: 1, Reason: "go test: zombie leader",
		})
		return err != nil, nil
	})
	_, err = executor.AbortCheckpoint(callCtx(t), &lockgatev1.AbortCheckpointRequest{
		LeaderEpoch: oldEpoch, ExecutorId: status.GetExecutorId(), ExecutorGeneration: status.GetExecutorGeneration(),
		PipelineName: "go-none", CheckpointId: 1, Reason: "go test: zombie leader",
	})
	seen, statusErr := executor.GetExecutorStatus(callCtx(t), &lockgatev1.GetExecutorStatusRequest{})
	if statusErr != nil {
		t.Fatal(statusErr)
	}
	expectFencingFailure(t, "AbortCheckpoint with the old leader's epoch", err, &lockgatev1.FencingFailure{
		Token: lockgatev1.FencingToken_FENCING_TOKEN_LEADER_EPOCH, Presented: oldEpoch.GetEpoch(),
		Current: seen.GetHighestLeaderEpochSeen().GetEpoch(),
	})

	if _, err := coord.DeletePipeline(callCtx(t), &lockgatev1.DeletePipelineRequest{Name: name}); err != nil {
		t.Fatalf("DeletePipeline: %v", err)
	}
}

// TestBadSpecFieldPaths: a bad spec surfaces as INVALID_ARGUMENT with one field path per
// violation, the same ones ValidatePipeline lists, and nothing is created.
func TestBadSpecFieldPaths(t *testing.T) {
	needTestbed(t)
	coord := dialCoordinators(t)
	spec := copySpec("Bad_Name", 1)
	spec.GetSink().GetKafka().Topic = ""
	spec.Checkpoint.IntervalMs = -5
	spec.TasksMax = -1

	_, err := coord.CreatePipeline(callCtx(t), &lockgatev1.CreatePipelineRequest{Spec: spec})
	lerr := asLockgateError(t, err)
	if lerr.Code != codes.InvalidArgument {
		t.Fatalf("CreatePipeline of a bad spec: %v, want INVALID_ARGUMENT", err)
	}
	paths := lerr.FieldPaths()
	for _, want := range []string{"name", "sink.kafka.topic", "checkpoint.interval_ms", "tasks_max"} {
		if !slices.Contains(paths, want) {
			t.Errorf("CreatePipeline's violations %v lack %s (%v)", paths, want, err)
		}
	}
	validated, err := coord.ValidatePipeline(callCtx(t), &lockgatev1.ValidatePipelineRequest{Spec: spec})
	if err != nil || validated.GetValid() {
		t.Fatalf("ValidatePipeline of a bad spec: %v, %v", validated, err)
	}
	var listed []string
	for _, v := range validated.GetViolations() {
		listed = append(listed, v.GetField())
	}
	if !slices.Equal(listed, paths) {
		t.Errorf("ValidatePipeline lists %v, CreatePipeline's error %v", listed, paths)
	}
	_, err = coord.GetPipeline(callCtx(t), &lockgatev1.GetPipelineRequest{Name: "Bad_Name"})
	if code := asLockgateError(t, err).Code; code != codes.NotFound && code != codes.InvalidArgument {
		t.Fatalf("GetPipeline after a refused create: %v", err)
	}
}
