package dev.lockgate.client;

import dev.lockgate.v1.*;
import dev.lockgate.v1.ExecutorServiceGrpc.ExecutorServiceBlockingStub;
import java.time.Duration;

/**
 * One executor's {@code lockgate.v1.ExecutorService}, at one address. Only the coordinator leader
 * drives the checkpoint protocol: {@code triggerCheckpoint}, {@code triggerCheckpoints}, {@code
 * commitCheckpoint} and {@code abortCheckpoint} from anyone else are refused with
 * FAILED_PRECONDITION and a {@link dev.lockgate.v1.FencingFailure} ({@link
 * LockgateException#fencingFailure()}) unless they carry the current leader epoch and executor
 * generation. {@code getExecutorStatus} without a leader
 * epoch is the read an operator makes. Thread-safe; get it from {@link
 * LockgateClient#executor(String)}.
 */
public final class ExecutorClient {
  private final Calls<ExecutorServiceBlockingStub> calls;

  ExecutorClient(Calls<ExecutorServiceBlockingStub> calls) {
    this.calls = calls;
  }

  /** The same client whose calls each get {@code timeout} as their deadline. */
  public ExecutorClient withTimeout(Duration timeout) {
    return new ExecutorClient(calls.withTimeout(timeout));
  }

  /** The address calls go to now (the last known leader, or a seed address). */
  public String currentAddress() {
    return calls.currentAddress();
  }

  /**
   * TriggerCheckpoint asks the executor to pre-commit checkpoint N on the listed tasks (step 1).
   */
  public TriggerCheckpointResponse triggerCheckpoint(TriggerCheckpointRequest request) {
    return calls.unary(request, ExecutorServiceBlockingStub::triggerCheckpoint);
  }

  /**
   * TriggerCheckpoints is TriggerCheckpoint for several pipelines' checkpoints on this executor in
   * one call, fenced once by the call's leader epoch and executor registration; each trigger is
   * answered in request order.
   */
  public TriggerCheckpointsResponse triggerCheckpoints(TriggerCheckpointsRequest request) {
    return calls.unary(request, ExecutorServiceBlockingStub::triggerCheckpoints);
  }

  /**
   * CommitCheckpoint commits the given sink handles of a COMPLETE checkpoint (step 4), through the
   * resume path (FindCoordinator + EndTxn with the stored producer id and epoch), whichever
   * executor pre-committed them.
   */
  public CommitCheckpointResponse commitCheckpoint(CommitCheckpointRequest request) {
    return calls.unary(request, ExecutorServiceBlockingStub::commitCheckpoint);
  }

  /**
   * AbortCheckpoint aborts the given sink handles of a checkpoint that will never be COMPLETE, and
   * cancels the executor's own in-flight pre-commit of it, aborting what that had opened.
   */
  public AbortCheckpointResponse abortCheckpoint(AbortCheckpointRequest request) {
    return calls.unary(request, ExecutorServiceBlockingStub::abortCheckpoint);
  }

  /**
   * NotifyAssignment tells the executor that the leader changed its assignment, so it heartbeats
   * now instead of at its next interval; the assignment itself still comes in the Heartbeat
   * response.
   */
  public NotifyAssignmentResponse notifyAssignment(NotifyAssignmentRequest request) {
    return calls.unary(request, ExecutorServiceBlockingStub::notifyAssignment);
  }

  /**
   * GetExecutorStatus returns the executor's identity, the highest leader epoch it has seen and the
   * tasks it runs.
   */
  public GetExecutorStatusResponse getExecutorStatus(GetExecutorStatusRequest request) {
    return calls.unary(request, ExecutorServiceBlockingStub::getExecutorStatus);
  }
}
