package lockgate_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/internal/testbed"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

// TestPipelineLifecycle calls every pipeline, task, offset and checkpoint RPC of
// CoordinatorService through the leader-following client, and checks each effect through
// another path: the Python CLI, or a client of a follower replica (which reads SQL).
func TestPipelineLifecycle(t *testing.T) {
	needTestbed(t)
	coord := dialCoordinators(t)
	const name = "go-lifecycle"
	spec := copySpec(name, 2)

	validated, err := coord.ValidatePipeline(callCtx(t), &lockgatev1.ValidatePipelineRequest{Spec: spec})
	if err != nil || !validated.GetValid() || validated.GetNameTaken() {
		t.Fatalf("ValidatePipeline of a good spec: %v, %v", validated, err)
	}
	created, err := coord.CreatePipeline(callCtx(t), &lockgatev1.CreatePipelineRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreatePipeline: %v", err)
	}
	if created.GetPipeline().GetConfigVersion() != 1 {
		t.Fatalf("CreatePipeline: config version %d, want 1", created.GetPipeline().GetConfigVersion())
	}

	// The Python CLI, given only the last replica, sees the pipeline as created.
	out, err := testbed.RunPython(callCtx(t), "-m", "lockgate.client.cli", "pipeline", "get", name,
		"--coordinator", tb.Coordinators[len(tb.Coordinators)-1], "--json")
	if err != nil {
		t.Fatalf("lockgate pipeline get: %v", err)
	}
	var seen lockgatev1.Pipeline
	if err := protojson.Unmarshal(out, &seen); err != nil {
		t.Fatalf("lockgate pipeline get --json printed %s: %v", out, err)
	}
	if !proto.Equal(seen.GetSpec(), created.GetPipeline().GetSpec()) || seen.GetConfigVersion() != 1 {
		t.Fatalf("the CLI sees %v, Go created %v", &seen, created.GetPipeline())
	}

	reader := follower(t, coord)
	validated, err = reader.ValidatePipeline(callCtx(t), &lockgatev1.ValidatePipelineRequest{Spec: spec})
	if err != nil || !validated.GetNameTaken() {
		t.Fatalf("ValidatePipeline after create: name_taken false (%v, %v)", validated, err)
	}
	var names []string
	for token := ""; ; {
		page, err := reader.ListPipelines(callCtx(t), &lockgatev1.ListPipelinesRequest{PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatalf("ListPipelines: %v", err)
		}
		for _, p := range page.GetPipelines() {
			names = append(names, p.GetName())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if !slices.Contains(names, name) {
		t.Fatalf("ListPipelines, page by page: %v lacks %s", names, name)
	}

	// The executors (control path only) run the tasks and commit empty checkpoints.
	var pipelineStatus *lockgatev1.GetPipelineStatusResponse
	waitFor(t, 30*time.Second, "tasks RUNNING and a checkpoint committed", func() (bool, error) {
		pipelineStatus, err = reader.GetPipelineStatus(callCtx(t), &lockgatev1.GetPipelineStatusRequest{Name: name})
		if err != nil {
			return false, err
		}
		for _, task := range pipelineStatus.GetTasks() {
			if task.GetState() != lockgatev1.TaskState_TASK_STATE_RUNNING {
				return false, fmt.Errorf("status %v", pipelineStatus)
			}
		}
		return len(pipelineStatus.GetTasks()) == 2 && pipelineStatus.GetLastCommittedCheckpointId() > 0, fmt.Errorf("status %v", pipelineStatus)
	})
	tasks, err := coord.ListTasks(callCtx(t), &lockgatev1.ListTasksRequest{PipelineName: name})
	if err != nil || len(tasks.GetTasks()) != 2 || tasks.GetTasks()[1].GetTaskId().GetTaskIndex() != 1 {
		t.Fatalf("ListTasks: %v, %v", tasks, err)
	}
	checkpoints, err := coord.ListCheckpoints(callCtx(t), &lockgatev1.ListCheckpointsRequest{
		PipelineName: name, States: []lockgatev1.CheckpointState{lockgatev1.CheckpointState_CHECKPOINT_STATE_COMMITTED}, PageSize: 3,
	})
	if err != nil || len(checkpoints.GetCheckpoints()) == 0 {
		t.Fatalf("ListCheckpoints COMMITTED: %v, %v", checkpoints, err)
	}
	newest := checkpoints.GetCheckpoints()[0]
	if newest.GetCheckpointId() < pipelineStatus.GetLastCommittedCheckpointId() {
		t.Fatalf("ListCheckpoints is not newest first: %d before the status's %d", newest.GetCheckpointId(), pipelineStatus.GetLastCommittedCheckpointId())
	}
	checkpoint, err := reader.GetCheckpoint(callCtx(t), &lockgatev1.GetCheckpointRequest{PipelineName: name, CheckpointId: newest.GetCheckpointId()})
	if err != nil || checkpoint.GetCheckpoint().GetState() != lockgatev1.CheckpointState_CHECKPOINT_STATE_COMMITTED || len(checkpoint.GetCheckpoint().GetTasks()) != 2 {
		t.Fatalf("GetCheckpoint %d: %v, %v", newest.GetCheckpointId(), checkpoint, err)
	}

	// UpdatePipeline with the config version check.
	changed := proto.Clone(spec).(*lockgatev1.PipelineSpec)
	changed.Checkpoint.IntervalMs = 400
	update := &lockgatev1.UpdatePipelineRequest{
		Name: name, Spec: changed, ExpectedConfigVersion: 1,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"checkpoint.interval_ms"}},
	}
	if _, err := coord.UpdatePipeline(callCtx(t), update); err != nil {
		t.Fatalf("UpdatePipeline: %v", err)
	}
	got, err := reader.GetPipeline(callCtx(t), &lockgatev1.GetPipelineRequest{Name: name})
	if err != nil || got.GetPipeline().GetConfigVersion() != 2 || got.GetPipeline().GetSpec().GetCheckpoint().GetIntervalMs() != 400 {
		t.Fatalf("GetPipeline on a follower after the update: %v, %v", got, err)
	}
	_, err = coord.UpdatePipeline(callCtx(t), update) // version 1 is stale now
	if lerr := asLockgateError(t, err); lerr.Code != codes.Aborted {
		t.Fatalf("UpdatePipeline with a stale config version: %v, want ABORTED", err)
	}

	// Target state verbs, seen by the follower.
	expectTarget := func(verb string, want lockgatev1.TargetState) {
		t.Helper()
		got, err := reader.GetPipeline(callCtx(t), &lockgatev1.GetPipelineRequest{Name: name})
		if err != nil || got.GetPipeline().GetTargetState() != want {
			t.Fatalf("after %s a follower reads %v (%v), want %v", verb, got.GetPipeline().GetTargetState(), err, want)
		}
	}
	if _, err := coord.PausePipeline(callCtx(t), &lockgatev1.PausePipelineRequest{Name: name}); err != nil {
		t.Fatalf("PausePipeline: %v", err)
	}
	expectTarget("PausePipeline", lockgatev1.TargetState_TARGET_STATE_PAUSED)
	if _, err := coord.ResumePipeline(callCtx(t), &lockgatev1.ResumePipelineRequest{Name: name}); err != nil {
		t.Fatalf("ResumePipeline: %v", err)
	}
	expectTarget("ResumePipeline", lockgatev1.TargetState_TARGET_STATE_RUNNING)

	// Restarts give tasks new generations.
	generation := func(index int) int64 {
		t.Helper()
		tasks, err := reader.ListTasks(callCtx(t), &lockgatev1.ListTasksRequest{PipelineName: name})
		if err != nil || len(tasks.GetTasks()) != 2 {
			t.Fatalf("ListTasks: %v, %v", tasks, err)
		}
		return tasks.GetTasks()[index].GetTaskGeneration()
	}
	// RestartTask is not implemented by the coordinator yet: the client surfaces that as
	// UNIMPLEMENTED with the server's advice, and nothing restarts.
	before := generation(0)
	_, err = coord.RestartTask(callCtx(t), &lockgatev1.RestartTaskRequest{TaskId: &lockgatev1.TaskId{PipelineName: name, TaskIndex: 0}})
	if lerr := asLockgateError(t, err); lerr.Code != codes.Unimplemented || !strings.Contains(lerr.Message, "RestartPipeline") {
		t.Fatalf("RestartTask: %v, want UNIMPLEMENTED pointing at RestartPipeline", err)
	}
	if after := generation(0); after != before {
		t.Fatalf("task 0's generation moved from %d to %d after a refused RestartTask", before, after)
	}
	before = generation(1)
	restartedAll, err := coord.RestartPipeline(callCtx(t), &lockgatev1.RestartPipelineRequest{Name: name, IncludeTasks: true})
	if err != nil || len(restartedAll.GetRestartedTasks()) != 2 {
		t.Fatalf("RestartPipeline include_tasks: %v, %v", restartedAll, err)
	}
	if after := generation(1); after <= before {
		t.Fatalf("task 1's generation %d after RestartPipeline, %d before", after, before)
	}

	// Offsets can be reset once the pipeline is STOPPED (and its last checkpoint committed).
	if _, err := coord.StopPipeline(callCtx(t), &lockgatev1.StopPipelineRequest{Name: name}); err != nil {
		t.Fatalf("StopPipeline: %v", err)
	}
	expectTarget("StopPipeline", lockgatev1.TargetState_TARGET_STATE_STOPPED)
	explicit := &lockgatev1.ResetOffsetsRequest{
		PipelineName: name, Reset_: &lockgatev1.ResetOffsetsRequest_Offsets{Offsets: &lockgatev1.PartitionOffsets{
			Offsets: []*lockgatev1.PartitionOffset{{Topic: topicIn, Partition: 2, Offset: 5}},
		}},
	}
	waitFor(t, 30*time.Second, "ResetOffsets accepted", func() (bool, error) {
		_, err := coord.ResetOffsets(callCtx(t), explicit)
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("ResetOffsets to explicit offsets: %v", err)
		}
		return err == nil, err // FAILED_PRECONDITION while a checkpoint is still to commit
	})
	hasOffset := func(offsets *lockgatev1.GetOffsetsResponse, offset int64) bool {
		return slices.ContainsFunc(offsets.GetOffsets(), func(o *lockgatev1.PartitionOffset) bool {
			return o.GetTopic() == topicIn && o.GetPartition() == 2 && o.GetOffset() == offset
		})
	}
	offsets, err := reader.GetOffsets(callCtx(t), &lockgatev1.GetOffsetsRequest{PipelineName: name})
	if err != nil || !hasOffset(offsets, 5) || offsets.GetCheckpointId() != 0 {
		t.Fatalf("GetOffsets on a follower after a reset of partition 2 to offset 5: %v, %v", offsets, err)
	}
	_, err = coord.ResetOffsets(callCtx(t), &lockgatev1.ResetOffsetsRequest{
		PipelineName: name, Reset_: &lockgatev1.ResetOffsetsRequest_Position{Position: lockgatev1.OffsetPosition_OFFSET_POSITION_EARLIEST},
	})
	if err != nil {
		t.Fatalf("ResetOffsets to EARLIEST: %v", err)
	}
	offsets, err = reader.GetOffsets(callCtx(t), &lockgatev1.GetOffsetsRequest{PipelineName: name})
	if err != nil || hasOffset(offsets, 5) || offsets.GetDefaultPosition() != lockgatev1.OffsetPosition_OFFSET_POSITION_EARLIEST {
		t.Fatalf("GetOffsets on a follower after a reset to EARLIEST: %v, %v", offsets, err)
	}

	if _, err := coord.DeletePipeline(callCtx(t), &lockgatev1.DeletePipelineRequest{Name: name}); err != nil {
		t.Fatalf("DeletePipeline: %v", err)
	}
	_, err = reader.GetPipeline(callCtx(t), &lockgatev1.GetPipelineRequest{Name: name})
	if lerr := asLockgateError(t, err); lerr.Code != codes.NotFound {
		t.Fatalf("GetPipeline on a follower after DeletePipeline: %v, want NOT_FOUND", err)
	}
}

// asLockgateError fails the test unless err is a *lockgate.Error.
func asLockgateError(t *testing.T, err error) *lockgate.Error {
	t.Helper()
	var lerr *lockgate.Error
	if !errors.As(err, &lerr) {
		t.Fatalf("error %v (%T) is not a *lockgate.Error", err, err)
	}
	return lerr
}
