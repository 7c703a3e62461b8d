package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.lockgate.client.testbed.Cli;
import dev.lockgate.client.testbed.Pipelines;
import dev.lockgate.client.testbed.Poll;
import dev.lockgate.client.testbed.Specs;
import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.AbortCheckpointRequest;
import dev.lockgate.v1.Checkpoint;
import dev.lockgate.v1.CheckpointState;
import dev.lockgate.v1.CheckpointTask;
import dev.lockgate.v1.CommitCheckpointRequest;
import dev.lockgate.v1.CreatePipelineRequest;
import dev.lockgate.v1.DeregisterExecutorRequest;
import dev.lockgate.v1.FencingFailure;
import dev.lockgate.v1.FencingToken;
import dev.lockgate.v1.GetCheckpointRequest;
import dev.lockgate.v1.GetClusterInfoRequest;
import dev.lockgate.v1.GetClusterInfoResponse;
import dev.lockgate.v1.GetExecutorStatusRequest;
import dev.lockgate.v1.GetExecutorStatusResponse;
import dev.lockgate.v1.GetPipelineStatusRequest;
import dev.lockgate.v1.HeartbeatRequest;
import dev.lockgate.v1.LeaderEpoch;
import dev.lockgate.v1.NotifyAssignmentRequest;
import dev.lockgate.v1.RegisterExecutorRequest;
import dev.lockgate.v1.RegisterExecutorResponse;
import dev.lockgate.v1.ReportCheckpointFailureRequest;
import dev.lockgate.v1.ReportPrecommitRequest;
import dev.lockgate.v1.ReportTaskFailureRequest;
import dev.lockgate.v1.RestartPipelineRequest;
import dev.lockgate.v1.Task;
import dev.lockgate.v1.TaskError;
import dev.lockgate.v1.TaskState;
import dev.lockgate.v1.TriggerCheckpointRequest;
import dev.lockgate.v1.TriggerCheckpointsRequest;
import io.grpc.Status;
import java.time.Duration;
import java.util.Optional;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.function.Executable;

/**
 * The executor side of the protocol: CoordinatorService's membership and Report* RPCs, made as an
 * executor would, and ExecutorService's RPCs, whose control calls a client without the leader's
 * tokens must see refused with a FencingFailure.
 */
@ExtendWith(TestbedExtension.class)
class ExecutorProtocolTest {
  private static final Duration WAIT = Duration.ofSeconds(30);

  private static Testbed testbed;
  private static Cli cli;
  private static LockgateClient lockgate;
  private static CoordinatorClient coordinator;

  @BeforeAll
  static void connect(Testbed shared) {
    testbed = shared;
    cli = new Cli(shared);
    lockgate = LockgateClient.builder().coordinators(shared.coordinators()).build();
    coordinator = lockgate.coordinator();
  }

  @AfterAll
  static void close() {
    lockgate.close();
  }

  private static Optional<JsonObject> cliExecutorIfListed(String executorId) {
    JsonObject info = cli.json("cluster", "status").getAsJsonObject();
    for (JsonElement executor : info.getAsJsonArray("executors")) {
      if (executor.getAsJsonObject().get("executor_id").getAsString().equals(executorId)) {
        return Optional.of(executor.getAsJsonObject());
      }
    }
    return Optional.empty();
  }

  private static JsonObject cliExecutor(String executorId) {
    return cliExecutorIfListed(executorId)
        .orElseThrow(() -> new AssertionError("the CLI lists no executor " + executorId));
  }

  @Test
  void registerHeartbeatDeregister() {
    String executorId = "java-" + UUID.randomUUID().toString().substring(0, 8);
    RegisterExecutorResponse registered =
        coordinator.registerExecutor(
            RegisterExecutorRequest.newBuilder()
                .setExecutorId(executorId)
                .setAddress("127.0.0.1:9") // nothing listens: it must never get a task
                .setSparkMaster("none")
                .setMaxTasks(1)
                .setVersion("java-client-test")
                .build());
    long generation = registered.getExecutorGeneration();
    try {
      JsonObject seen = cliExecutor(executorId);
      assertEquals("EXECUTOR_STATE_ALIVE", seen.get("state").getAsString());
      assertEquals(generation, seen.get("executor_generation").getAsLong());

      var beat =
          coordinator.heartbeat(
              HeartbeatRequest.newBuilder()
                  .setExecutorId(executorId)
                  .setExecutorGeneration(generation)
                  .setHighestLeaderEpochSeen(registered.getLeaderEpoch())
                  .build());
      assertEquals(leaderEpoch().getEpoch(), beat.getLeaderEpoch().getEpoch());
      assertTrue(beat.getHeartbeatIntervalMs() > 0);
    } finally {
      coordinator.deregisterExecutor(
          DeregisterExecutorRequest.newBuilder()
              .setExecutorId(executorId)
              .setExecutorGeneration(generation)
              .build());
    }
    // GetClusterInfo lists executors alive or recently expired: one that left is gone.
    assertEquals(Optional.empty(), cliExecutorIfListed(executorId));
  }

  @Test
  void reportsAsTheTasksExecutor() {
    String name = Specs.uniqueName("java-reports");
    coordinator.createPipeline(
        CreatePipelineRequest.newBuilder().setSpec(Specs.copy(testbed, name)).build());
    try {
      // The newest committed checkpoint with task 0 still at its generation of then.
      Task task = runningTask(name);
      Checkpoint checkpoint =
          Poll.until(
              WAIT,
              "a committed checkpoint of task 0's generation",
              () -> {
                long id =
                    coordinator
                        .getPipelineStatus(
                            GetPipelineStatusRequest.newBuilder().setName(name).build())
                        .getLastCommittedCheckpointId();
                if (id == 0) {
                  return Optional.empty();
                }
                Checkpoint c =
                    coordinator
                        .getCheckpoint(
                            GetCheckpointRequest.newBuilder()
                                .setPipelineName(name)
                                .setCheckpointId(id)
                                .build())
                        .getCheckpoint();
                return c.getTasksList().stream()
                        .anyMatch(
                            t ->
                                t.getTaskId().equals(task.getTaskId())
                                    && t.getTaskGeneration() == task.getTaskGeneration())
                    ? Optional.of(c)
                    : Optional.empty();
              });

      // A late failure report of a committed checkpoint changes nothing.
      var late =
          coordinator.reportCheckpointFailure(
              ReportCheckpointFailureRequest.newBuilder()
                  .setLeaderEpoch(checkpoint.getLeaderEpoch())
                  .setCheckpointId(checkpoint.getCheckpointId())
                  .setTaskId(task.getTaskId())
                  .setTaskGeneration(task.getTaskGeneration())
                  .setExecutorId(task.getExecutorId())
                  .setExecutorGeneration(task.getExecutorGeneration())
                  .setError(TaskError.newBuilder().setMessage("too late"))
                  .build());
      assertEquals(CheckpointState.CHECKPOINT_STATE_COMMITTED, late.getCheckpointState());
      assertEquals(
          "CHECKPOINT_STATE_COMMITTED",
          cli.json(
                  "pipeline",
                  "checkpoints",
                  name,
                  "--id",
                  Long.toString(checkpoint.getCheckpointId()))
              .getAsJsonObject()
              .get("state")
              .getAsString());

      // A pre-commit from an older generation of the task is fenced.
      LockgateException fenced =
          assertThrows(
              LockgateException.class,
              () ->
                  coordinator.reportPrecommit(
                      ReportPrecommitRequest.newBuilder()
                          .setLeaderEpoch(checkpoint.getLeaderEpoch())
                          .setCheckpointId(checkpoint.getCheckpointId())
                          .setTaskId(task.getTaskId())
                          .setTaskGeneration(task.getTaskGeneration() - 1)
                          .setExecutorId(task.getExecutorId())
                          .setExecutorGeneration(task.getExecutorGeneration())
                          .build()));
      FencingFailure failure = fencingFailure(fenced);
      assertEquals(FencingToken.FENCING_TOKEN_TASK_GENERATION, failure.getToken());
      assertEquals(name + "/0", failure.getSubject());
      assertEquals(task.getTaskGeneration() - 1, failure.getPresented());

      // A task failure report marks the task FAILED, as the CLI shows; a restart of the failed
      // tasks brings it back.
      coordinator.reportTaskFailure(
          ReportTaskFailureRequest.newBuilder()
              .setTaskId(task.getTaskId())
              .setTaskGeneration(task.getTaskGeneration())
              .setExecutorId(task.getExecutorId())
              .setExecutorGeneration(task.getExecutorGeneration())
              .setError(
                  TaskError.newBuilder().setMessage("reported from Java").setErrorType("JavaTest"))
              .build());
      JsonObject seen =
          cli.json("pipeline", "status", name)
              .getAsJsonObject()
              .getAsJsonArray("tasks")
              .get(0)
              .getAsJsonObject();
      assertEquals("TASK_STATE_FAILED", seen.get("state").getAsString());
      assertEquals(
          "reported from Java", seen.getAsJsonObject("last_error").get("message").getAsString());
      var restart =
          coordinator.restartPipeline(
              RestartPipelineRequest.newBuilder()
                  .setName(name)
                  .setIncludeTasks(true)
                  .setOnlyFailed(true)
                  .build());
      assertEquals(1, restart.getRestartedTasksCount());
      assertEquals(task.getTaskId(), restart.getRestartedTasks(0));
      runningTask(name);
    } finally {
      Pipelines.stopAndDelete(coordinator, name);
    }
  }

  @Test
  void executorServiceStatusAndFencedControlCalls() {
    GetClusterInfoResponse cluster =
        coordinator.getClusterInfo(GetClusterInfoRequest.getDefaultInstance());
    String address = testbed.executors().get(0);
    ExecutorClient executor = lockgate.executor(address);
    GetExecutorStatusResponse status =
        executor.getExecutorStatus(GetExecutorStatusRequest.getDefaultInstance());
    var registered =
        cluster.getExecutorsList().stream()
            .filter(e -> e.getAddress().equals(address))
            .findFirst()
            .orElseThrow();
    assertEquals(registered.getExecutorId(), status.getExecutorId());
    assertEquals(registered.getExecutorGeneration(), status.getExecutorGeneration());
    JsonObject seen = cliExecutor(status.getExecutorId());
    assertEquals(address, seen.get("address").getAsString());

    // The leader's epoch is not enough: these calls name a registration that is not current.
    LeaderEpoch epoch = status.getHighestLeaderEpochSeen();
    long staleGeneration = status.getExecutorGeneration() - 1;
    String pipeline = "java-fenced";
    Executable trigger =
        () ->
            executor.triggerCheckpoint(
                TriggerCheckpointRequest.newBuilder()
                    .setLeaderEpoch(epoch)
                    .setExecutorId(status.getExecutorId())
                    .setExecutorGeneration(staleGeneration)
                    .setPipelineName(pipeline)
                    .setCheckpointId(1)
                    .setConfigVersion(1)
                    .setTimeoutMs(1000)
                    .addTasks(
                        CheckpointTask.newBuilder()
                            .setTaskId(
                                dev.lockgate.v1.TaskId.newBuilder().setPipelineName(pipeline))
                            .setTaskGeneration(1))
                    .build());
    Executable triggers =
        () ->
            executor.triggerCheckpoints(
                TriggerCheckpointsRequest.newBuilder()
                    .setLeaderEpoch(epoch)
                    .setExecutorId(status.getExecutorId())
                    .setExecutorGeneration(staleGeneration)
                    .addTriggers(
                        TriggerCheckpointRequest.newBuilder()
                            .setPipelineName(pipeline)
                            .setCheckpointId(1)
                            .setConfigVersion(1)
                            .setTimeoutMs(1000)
                            .addTasks(
                                CheckpointTask.newBuilder()
                                    .setTaskId(
                                        dev.lockgate.v1.TaskId.newBuilder()
                                            .setPipelineName(pipeline))
                                    .setTaskGeneration(1)
                                    .setTransactionalIdPrefix(pipeline)))
                    .build());
    Executable commit =
        () ->
            executor.commitCheckpoint(
                CommitCheckpointRequest.newBuilder()
                    .setLeaderEpoch(epoch)
                    .setExecutorId(status.getExecutorId())
                    .setExecutorGeneration(staleGeneration)
                    .setPipelineName(pipeline)
                    .setCheckpointId(1)
                    .build());
    Executable abort =
        () ->
            executor.abortCheckpoint(
                AbortCheckpointRequest.newBuilder()
                    .setLeaderEpoch(epoch)
                    .setExecutorId(status.getExecutorId())
                    .setExecutorGeneration(staleGeneration)
                    .setPipelineName(pipeline)
                    .setCheckpointId(1)
                    .setReason("a Java test")
                    .build());
    Executable notify =
        () ->
            executor.notifyAssignment(
                NotifyAssignmentRequest.newBuilder()
                    .setLeaderEpoch(epoch)
                    .setExecutorId(status.getExecutorId())
                    .setExecutorGeneration(staleGeneration)
                    .build());
    for (Executable call : new Executable[] {trigger, triggers, commit, abort, notify}) {
      FencingFailure failure = fencingFailure(assertThrows(LockgateException.class, call));
      assertEquals(FencingToken.FENCING_TOKEN_EXECUTOR_GENERATION, failure.getToken());
      assertEquals(status.getExecutorId(), failure.getSubject());
      assertEquals(staleGeneration, failure.getPresented());
      assertEquals(status.getExecutorGeneration(), failure.getCurrent());
    }
  }

  static FencingFailure fencingFailure(LockgateException refused) {
    assertEquals(Status.Code.FAILED_PRECONDITION, refused.getStatus().getCode(), refused::toString);
    return refused
        .fencingFailure()
        .orElseThrow(
            () -> new AssertionError("no FencingFailure detail in " + refused.statusProto()));
  }

  private static LeaderEpoch leaderEpoch() {
    return coordinator.getClusterInfo(GetClusterInfoRequest.getDefaultInstance()).getLeaderEpoch();
  }

  private static Task runningTask(String name) {
    return Poll.until(
        WAIT,
        "task 0 of " + name + " RUNNING",
        () -> {
          return coordinator
              .getPipelineStatus(GetPipelineStatusRequest.newBuilder().setName(name).build())
              .getTasksList()
              .stream()
              .filter(task -> task.getTaskId().getTaskIndex() == 0)
              .filter(task -> task.getState() == TaskState.TASK_STATE_RUNNING)
              .findFirst();
        });
  }
}
