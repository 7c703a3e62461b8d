package dev.lockgate.client;

import dev.lockgate.v1.*;
import dev.lockgate.v1.CoordinatorServiceGrpc.CoordinatorServiceBlockingStub;
import java.time.Duration;

/**
 * The coordinators' {@code lockgate.v1.CoordinatorService}: one method per RPC, each sent to the
 * current leader among the addresses given to {@link LockgateClient.Builder#coordinators} (followed
 * through the {@code lockgate-leader} trailer of a follower's UNAVAILABLE), retried on UNAVAILABLE
 * within the call's deadline, with a request_id filled in on mutating calls. A failed call throws
 * {@link LockgateException}. Thread-safe; get it from {@link LockgateClient#coordinator()}.
 */
public final class CoordinatorClient {
  private final Calls<CoordinatorServiceBlockingStub> calls;

  CoordinatorClient(Calls<CoordinatorServiceBlockingStub> calls) {
    this.calls = calls;
  }

  /** The same client whose calls each get {@code timeout} as their deadline. */
  public CoordinatorClient withTimeout(Duration timeout) {
    return new CoordinatorClient(calls.withTimeout(timeout));
  }

  /** The address calls go to now (the last known leader, or a seed address). */
  public String currentAddress() {
    return calls.currentAddress();
  }

  /**
   * GetClusterInfo returns the leader (id, address, epoch), the coordinator replicas and the
   * executors.
   */
  public GetClusterInfoResponse getClusterInfo(GetClusterInfoRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::getClusterInfo);
  }

  /**
   * RegisterExecutor adds an executor to the cluster, or re-registers it with a new executor
   * generation (fencing the previous registration of the same id), and returns its first
   * assignment.
   */
  public RegisterExecutorResponse registerExecutor(RegisterExecutorRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::registerExecutor);
  }

  /**
   * Heartbeat keeps an executor's session alive, reports the observed state of its tasks, and
   * returns the full set of tasks it must run.
   */
  public HeartbeatResponse heartbeat(HeartbeatRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::heartbeat);
  }

  /**
   * DeregisterExecutor removes an executor cleanly; its tasks move to other executors at once,
   * without waiting for the session timeout.
   */
  public DeregisterExecutorResponse deregisterExecutor(DeregisterExecutorRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::deregisterExecutor);
  }

  /**
   * CreatePipeline validates a spec, stores it as config version 1 and splits the pipeline into
   * tasks.
   */
  public CreatePipelineResponse createPipeline(CreatePipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::createPipeline);
  }

  /** GetPipeline returns one pipeline's spec, target state and config version. */
  public GetPipelineResponse getPipeline(GetPipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::getPipeline);
  }

  /** ListPipelines returns pipelines ordered by name, one page at a time. */
  public ListPipelinesResponse listPipelines(ListPipelinesRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::listPipelines);
  }

  /**
   * UpdatePipeline changes the fields of a spec named by a field mask; the config version grows by
   * one and running tasks restart on the new config at the next checkpoint boundary.
   */
  public UpdatePipelineResponse updatePipeline(UpdatePipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::updatePipeline);
  }

  /**
   * DeletePipeline stops a pipeline's tasks, commits its COMPLETE checkpoints, aborts the in-
   * flight ones and removes it with its history.
   */
  public DeletePipelineResponse deletePipeline(DeletePipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::deletePipeline);
  }

  /**
   * ValidatePipeline checks a spec exactly as CreatePipeline would and returns every field-level
   * violation, without creating anything.
   */
  public ValidatePipelineResponse validatePipeline(ValidatePipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::validatePipeline);
  }

  /**
   * PausePipeline sets the target state to PAUSED: tasks stay assigned but take no new checkpoints;
   * in-flight checkpoints finish.
   */
  public PausePipelineResponse pausePipeline(PausePipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::pausePipeline);
  }

  /** ResumePipeline sets the target state to RUNNING from PAUSED or STOPPED. */
  public ResumePipelineResponse resumePipeline(ResumePipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::resumePipeline);
  }

  /**
   * StopPipeline sets the target state to STOPPED: in-flight checkpoints finish or abort, then
   * tasks are released.
   */
  public StopPipelineResponse stopPipeline(StopPipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::stopPipeline);
  }

  /**
   * RestartPipeline re-plans a pipeline's tasks from its current spec and, with include_tasks,
   * restarts its tasks with new generations (only the FAILED ones with only_failed), as Kafka
   * Connect's restart.
   */
  public RestartPipelineResponse restartPipeline(RestartPipelineRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::restartPipeline);
  }

  /**
   * GetPipelineStatus returns a pipeline's target state and, per task, the observed state, the
   * executor and generation running it and its last error, with the latest checkpoint ids and the
   * newest abort (its reason, the aborts in a row, the tasks that had not pre-committed and why).
   */
  public GetPipelineStatusResponse getPipelineStatus(GetPipelineStatusRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::getPipelineStatus);
  }

  /**
   * ListTasks returns tasks, optionally of one pipeline or one executor, ordered by pipeline name
   * and task index.
   */
  public ListTasksResponse listTasks(ListTasksRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::listTasks);
  }

  /**
   * RestartTask restarts one task with a new generation; it restores from the last COMPLETE
   * checkpoint.
   */
  public RestartTaskResponse restartTask(RestartTaskRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::restartTask);
  }

  /**
   * GetOffsets returns, per source partition, the offset a pipeline resumes from: the end offsets
   * of its last COMPLETE checkpoint, or those set by ResetOffsets.
   */
  public GetOffsetsResponse getOffsets(GetOffsetsRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::getOffsets);
  }

  /**
   * ResetOffsets sets the offsets a STOPPED pipeline resumes from, per partition or to
   * earliest/latest, as Kafka Connect's offsets API.
   */
  public ResetOffsetsResponse resetOffsets(ResetOffsetsRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::resetOffsets);
  }

  /**
   * ListCheckpoints returns a pipeline's checkpoint history, newest first, without the per-task
   * details.
   */
  public ListCheckpointsResponse listCheckpoints(ListCheckpointsRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::listCheckpoints);
  }

  /**
   * GetCheckpoint returns one checkpoint with its timings and each task's part (offset ranges, sink
   * handles, counts).
   */
  public GetCheckpointResponse getCheckpoint(GetCheckpointRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::getCheckpoint);
  }

  /**
   * ReportPrecommit is step 2's answer: a task pre-committed checkpoint N and hands in its offset
   * ranges and sink handles; a repeat of the same report succeeds.
   */
  public ReportPrecommitResponse reportPrecommit(ReportPrecommitRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::reportPrecommit);
  }

  /**
   * ReportPrecommits is ReportPrecommit for many tasks of one executor in one call, answered per
   * report in request order.
   */
  public ReportPrecommitsResponse reportPrecommits(ReportPrecommitsRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::reportPrecommits);
  }

  /** ReportTaskFailure marks a task FAILED with its error (e.g. */
  public ReportTaskFailureResponse reportTaskFailure(ReportTaskFailureRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::reportTaskFailure);
  }

  /**
   * ReportCheckpointFailure says a task could not pre-commit checkpoint N; the leader aborts N (and
   * every later in-flight checkpoint of the pipeline).
   */
  public ReportCheckpointFailureResponse reportCheckpointFailure(
      ReportCheckpointFailureRequest request) {
    return calls.unary(request, CoordinatorServiceBlockingStub::reportCheckpointFailure);
  }
}
