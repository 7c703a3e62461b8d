package lockgate_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

// fakeExecutor is an ExecutorService served by the test (with the generated server code):
// it accepts every trigger, commit and abort the leader sends and hands the triggers to
// the test, which answers them with the Report* RPCs as an executor would.
type fakeExecutor struct {
	lockgatev1.UnimplementedExecutorServiceServer
	triggers chan *lockgatev1.TriggerCheckpointRequest
}

func (f *fakeExecutor) TriggerCheckpoint(_ context.Context, request *lockgatev1.TriggerCheckpointRequest) (*lockgatev1.TriggerCheckpointResponse, error) {
	response := &lockgatev1.TriggerCheckpointResponse{}
	for _, task := range request.GetTasks() {
		response.Results = append(response.Results, &lockgatev1.TaskTriggerResult{
			TaskId: task.GetTaskId(), Outcome: lockgatev1.TriggerOutcome_TRIGGER_OUTCOME_ACCEPTED, CurrentTaskGeneration: task.GetTaskGeneration(),
		})
	}
	select {
	case f.triggers <- request:
	default: // the test stopped listening
	}
	return response, nil
}

func (f *fakeExecutor) CommitCheckpoint(_ context.Context, request *lockgatev1.CommitCheckpointRequest) (*lockgatev1.CommitCheckpointResponse, error) {
	return &lockgatev1.CommitCheckpointResponse{HandlesCommitted: int32(len(request.GetHandles()))}, nil
}

func (f *fakeExecutor) AbortCheckpoint(_ context.Context, request *lockgatev1.AbortCheckpointRequest) (*lockgatev1.AbortCheckpointResponse, error) {
	return &lockgatev1.AbortCheckpointResponse{HandlesAborted: int32(len(request.GetHandles()))}, nil
}

// membership is the fake executor's session: it heartbeats until stopped, reporting each
// assigned task in the state the test set (RUNNING by default).
type membership struct {
	coord      *lockgate.Coordinator
	id         string
	generation int64

	mu          sync.Mutex
	assignments []*lockgatev1.TaskAssignment
	failed      map[int32]bool
	lastErr     error
}

func (m *membership) statuses() []*lockgatev1.TaskStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*lockgatev1.TaskStatus
	for _, a := range m.assignments {
		state := lockgatev1.TaskState_TASK_STATE_RUNNING
		if m.failed[a.GetTaskId().GetTaskIndex()] {
			state = lockgatev1.TaskState_TASK_STATE_FAILED
		}
		out = append(out, &lockgatev1.TaskStatus{TaskId: a.GetTaskId(), TaskGeneration: a.GetTaskGeneration(), State: state})
	}
	return out
}

func (m *membership) heartbeat(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, callTimeout)
		response, err := m.coord.Heartbeat(callCtx, &lockgatev1.HeartbeatRequest{
			ExecutorId: m.id, ExecutorGeneration: m.generation, TaskStatuses: m.statuses(),
		})
		cancel()
		m.mu.Lock()
		if err == nil {
			m.assignments = response.GetAssignments()
		} else if ctx.Err() == nil {
			m.lastErr = err
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// assignment is the fake's task of pipeline, nil if it has none yet.
func (m *membership) assignment(pipeline string) *lockgatev1.TaskAssignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.assignments {
		if a.GetTaskId().GetPipelineName() == pipeline {
			return a
		}
	}
	return nil
}

// TestExecutorProtocol plays an executor against the real coordinators: RegisterExecutor,
// Heartbeat (which delivers a task), ReportPrecommit (the checkpoint completes), a
// ReportCheckpointFailure (the next one aborts), ReportPrecommits (the one after that
// completes), ReportTaskFailure (the task is FAILED), DeregisterExecutor (the executor has
// LEFT), each effect read from a follower replica.
func TestExecutorProtocol(t *testing.T) {
	needTestbed(t)
	coord := dialCoordinators(t)
	reader := follower(t, coord)
	fake := &fakeExecutor{triggers: make(chan *lockgatev1.TriggerCheckpointRequest, 64)}
	server := grpc.NewServer()
	lockgatev1.RegisterExecutorServiceServer(server, fake)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)

	const id, name = "go-fake", "go-protocol"
	registered, err := coord.RegisterExecutor(callCtx(t), &lockgatev1.RegisterExecutorRequest{
		ExecutorId: id, Address: listener.Addr().String(), SparkMaster: "none", MaxTasks: 4, Version: "go-test",
	})
	if err != nil {
		t.Fatalf("RegisterExecutor: %v", err)
	}
	member := &membership{coord: coord, id: id, generation: registered.GetExecutorGeneration(), failed: map[int32]bool{}}
	info, err := reader.GetClusterInfo(callCtx(t), &lockgatev1.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, e := range info.GetExecutors() {
		listed = listed || (e.GetExecutorId() == id && e.GetExecutorGeneration() == member.generation &&
			e.GetAddress() == listener.Addr().String() && e.GetState() == lockgatev1.ExecutorState_EXECUTOR_STATE_ALIVE)
	}
	if !listed {
		t.Fatalf("a follower does not list %s generation %d ALIVE: %v", id, member.generation, info.GetExecutors())
	}
	heartbeats, stopHeartbeats := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		member.heartbeat(heartbeats, time.Duration(registered.GetHeartbeatIntervalMs())*time.Millisecond)
	}()
	t.Cleanup(func() { stopHeartbeats(); <-stopped })

	// Three tasks over three live executors: one lands on the fake.
	if _, err := coord.CreatePipeline(callCtx(t), &lockgatev1.CreatePipelineRequest{Spec: copySpec(name, 3)}); err != nil {
		t.Fatalf("CreatePipeline: %v", err)
	}
	t.Cleanup(func() {
		_, _ = coord.DeletePipeline(context.Background(), &lockgatev1.DeletePipelineRequest{Name: name})
	})
	var task *lockgatev1.TaskAssignment
	waitFor(t, 30*time.Second, "a Heartbeat answer assigns the fake a task", func() (bool, error) {
		task = member.assignment(name)
		member.mu.Lock()
		defer member.mu.Unlock()
		return task != nil, member.lastErr
	})
	nextTrigger := func(after int64) *lockgatev1.TriggerCheckpointRequest {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case trigger := <-fake.triggers:
				if trigger.GetPipelineName() == name && trigger.GetCheckpointId() > after {
					return trigger
				}
			case <-timeout:
				t.Fatalf("no TriggerCheckpoint of %s after checkpoint %d reached the fake within 30 s", name, after)
			}
		}
	}
	ranges := func(trigger *lockgatev1.TriggerCheckpointRequest) []*lockgatev1.OffsetRange {
		type partition struct {
			topic string
			index int32
		}
		start := map[partition]int64{}
		for _, o := range trigger.GetTasks()[0].GetStartOffsets() {
			start[partition{o.GetTopic(), o.GetPartition()}] = o.GetOffset()
		}
		var out []*lockgatev1.OffsetRange
		for _, tp := range task.GetSourcePartitions() {
			offset := start[partition{tp.GetTopic(), tp.GetPartition()}]
			out = append(out, &lockgatev1.OffsetRange{Topic: tp.GetTopic(), Partition: tp.GetPartition(), StartOffset: offset, EndOffset: offset})
		}
		return out
	}

	// ReportPrecommit: the fake's part of checkpoint N is in; N completes and commits.
	first := nextTrigger(0)
	_, err = coord.ReportPrecommit(callCtx(t), &lockgatev1.ReportPrecommitRequest{
		LeaderEpoch: first.GetLeaderEpoch(), CheckpointId: first.GetCheckpointId(), TaskId: task.GetTaskId(),
		TaskGeneration: task.GetTaskGeneration(), ExecutorId: id, ExecutorGeneration: member.generation,
		SourceRanges: ranges(first), Counts: &lockgatev1.RecordCounts{}, PrecommitDurationMs: 1,
	})
	if err != nil {
		t.Fatalf("ReportPrecommit of checkpoint %d: %v", first.GetCheckpointId(), err)
	}
	waitFor(t, 30*time.Second, "checkpoint committed with the fake's pre-commit", func() (bool, error) {
		checkpoint, err := reader.GetCheckpoint(callCtx(t), &lockgatev1.GetCheckpointRequest{PipelineName: name, CheckpointId: first.GetCheckpointId()})
		if err != nil || checkpoint.GetCheckpoint().GetState() != lockgatev1.CheckpointState_CHECKPOINT_STATE_COMMITTED {
			return false, err
		}
		for _, part := range checkpoint.GetCheckpoint().GetTasks() {
			if part.GetTaskId().GetTaskIndex() == task.GetTaskId().GetTaskIndex() {
				return part.GetExecutorId() == id && part.GetState() == lockgatev1.TaskCheckpointState_TASK_CHECKPOINT_STATE_COMMITTED, nil
			}
		}
		return false, nil
	})

	// ReportCheckpointFailure: the next checkpoint aborts, with the fake's reason.
	second := nextTrigger(first.GetCheckpointId())
	failure, err := coord.ReportCheckpointFailure(callCtx(t), &lockgatev1.ReportCheckpointFailureRequest{
		LeaderEpoch: second.GetLeaderEpoch(), CheckpointId: second.GetCheckpointId(), TaskId: task.GetTaskId(),
		TaskGeneration: task.GetTaskGeneration(), ExecutorId: id, ExecutorGeneration: member.generation,
		Error: &lockgatev1.TaskError{Message: "go test: pre-commit failed", ErrorType: "GoTestError"},
	})
	if err != nil || failure.GetCheckpointState() != lockgatev1.CheckpointState_CHECKPOINT_STATE_ABORTED {
		t.Fatalf("ReportCheckpointFailure of checkpoint %d: %v, %v", second.GetCheckpointId(), failure, err)
	}
	aborted, err := reader.GetCheckpoint(callCtx(t), &lockgatev1.GetCheckpointRequest{PipelineName: name, CheckpointId: second.GetCheckpointId()})
	if err != nil || aborted.GetCheckpoint().GetState() != lockgatev1.CheckpointState_CHECKPOINT_STATE_ABORTED {
		t.Fatalf("a follower reads checkpoint %d as %v (%v), want ABORTED", second.GetCheckpointId(), aborted, err)
	}

	// ReportPrecommits: the fake's part of the next checkpoint, in a batch of one; it
	// completes and commits, and the repeat of the same batch is answered, not refused.
	third := nextTrigger(second.GetCheckpointId())
	batch := &lockgatev1.ReportPrecommitsRequest{
		RequestId: uuid.NewString(), ExecutorId: id,
		Reports: []*lockgatev1.ReportPrecommitRequest{{
			LeaderEpoch: third.GetLeaderEpoch(), CheckpointId: third.GetCheckpointId(), TaskId: task.GetTaskId(),
			TaskGeneration: task.GetTaskGeneration(), ExecutorId: id, ExecutorGeneration: member.generation,
			SourceRanges: ranges(third), Counts: &lockgatev1.RecordCounts{}, PrecommitDurationMs: 1,
		}},
	}
	for attempt := 1; attempt <= 2; attempt++ {
		answer, err := coord.ReportPrecommits(callCtx(t), batch)
		if err != nil || len(answer.GetResults()) != 1 || answer.GetResults()[0].GetRefusal() != nil ||
			answer.GetResults()[0].GetCheckpointState() == lockgatev1.CheckpointState_CHECKPOINT_STATE_UNSPECIFIED {
			t.Fatalf("ReportPrecommits of checkpoint %d (call %d): %v, %v", third.GetCheckpointId(), attempt, answer, err)
		}
	}
	waitFor(t, 30*time.Second, "the batched pre-commit's checkpoint committed", func() (bool, error) {
		checkpoint, err := reader.GetCheckpoint(callCtx(t), &lockgatev1.GetCheckpointRequest{PipelineName: name, CheckpointId: third.GetCheckpointId()})
		if err != nil {
			return false, err
		}
		return checkpoint.GetCheckpoint().GetState() == lockgatev1.CheckpointState_CHECKPOINT_STATE_COMMITTED, nil
	})

	// ReportTaskFailure: the task is FAILED with the fake's error.
	member.mu.Lock()
	member.failed[task.GetTaskId().GetTaskIndex()] = true
	member.mu.Unlock()
	const message = "go test: the task failed"
	if _, err := coord.ReportTaskFailure(callCtx(t), &lockgatev1.ReportTaskFailureRequest{
		TaskId: task.GetTaskId(), TaskGeneration: task.GetTaskGeneration(), ExecutorId: id, ExecutorGeneration: member.generation,
		Error: &lockgatev1.TaskError{Message: message, ErrorType: "GoTestError"},
	}); err != nil {
		t.Fatalf("ReportTaskFailure: %v", err)
	}
	status, err := reader.GetPipelineStatus(callCtx(t), &lockgatev1.GetPipelineStatusRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	failedTask := status.GetTasks()[task.GetTaskId().GetTaskIndex()]
	if failedTask.GetState() != lockgatev1.TaskState_TASK_STATE_FAILED || !strings.Contains(failedTask.GetLastError().GetMessage(), message) {
		t.Fatalf("a follower reads the task as %v after ReportTaskFailure", failedTask)
	}

	// DeregisterExecutor: the fake has LEFT.
	stopHeartbeats()
	<-stopped
	if _, err := coord.DeregisterExecutor(callCtx(t), &lockgatev1.DeregisterExecutorRequest{ExecutorId: id, ExecutorGeneration: member.generation}); err != nil {
		t.Fatalf("DeregisterExecutor: %v", err)
	}
	info, err = reader.GetClusterInfo(callCtx(t), &lockgatev1.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range info.GetExecutors() {
		if e.GetExecutorId() == id && e.GetState() == lockgatev1.ExecutorState_EXECUTOR_STATE_ALIVE {
			t.Fatalf("a follower still lists %s ALIVE after DeregisterExecutor: %v", id, e)
		}
	}
}
