package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.protobuf.FieldMask;
import dev.lockgate.client.testbed.Cli;
import dev.lockgate.client.testbed.Pipelines;
import dev.lockgate.client.testbed.Poll;
import dev.lockgate.client.testbed.Specs;
import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.CheckpointSpec;
import dev.lockgate.v1.CheckpointState;
import dev.lockgate.v1.CreatePipelineRequest;
import dev.lockgate.v1.GetCheckpointRequest;
import dev.lockgate.v1.GetOffsetsRequest;
import dev.lockgate.v1.GetOffsetsResponse;
import dev.lockgate.v1.GetPipelineRequest;
import dev.lockgate.v1.GetPipelineStatusRequest;
import dev.lockgate.v1.GetPipelineStatusResponse;
import dev.lockgate.v1.ListCheckpointsRequest;
import dev.lockgate.v1.ListPipelinesRequest;
import dev.lockgate.v1.ListPipelinesResponse;
import dev.lockgate.v1.ListTasksRequest;
import dev.lockgate.v1.PartitionOffset;
import dev.lockgate.v1.PartitionOffsets;
import dev.lockgate.v1.PausePipelineRequest;
import dev.lockgate.v1.Pipeline;
import dev.lockgate.v1.PipelineSpec;
import dev.lockgate.v1.ResetOffsetsRequest;
import dev.lockgate.v1.RestartPipelineRequest;
import dev.lockgate.v1.RestartTaskRequest;
import dev.lockgate.v1.ResumePipelineRequest;
import dev.lockgate.v1.StopPipelineRequest;
import dev.lockgate.v1.Task;
import dev.lockgate.v1.TaskId;
import dev.lockgate.v1.TaskState;
import dev.lockgate.v1.UpdatePipelineRequest;
import dev.lockgate.v1.ValidatePipelineRequest;
import dev.lockgate.v1.ValidatePipelineResponse;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The pipeline RPCs of CoordinatorService, each checked through the Python CLI (its own stubs, its
 * own channel): what Java created, changed, paused, stopped, reset or deleted is what the CLI reads
 * back.
 */
@ExtendWith(TestbedExtension.class)
class PipelineRpcsTest {
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

  private static JsonObject cliPipeline(String name) {
    return cli.json("pipeline", "get", name).getAsJsonObject();
  }

  private static Pipeline create(PipelineSpec spec) {
    return coordinator
        .createPipeline(CreatePipelineRequest.newBuilder().setSpec(spec).build())
        .getPipeline();
  }

  private static void delete(String name) {
    Pipelines.stopAndDelete(coordinator, name);
  }

  @Test
  void createValidateGetListUpdateDelete() {
    String name = Specs.uniqueName("java-crud");
    PipelineSpec spec = Specs.copy(testbed, name);

    ValidatePipelineResponse before =
        coordinator.validatePipeline(ValidatePipelineRequest.newBuilder().setSpec(spec).build());
    assertTrue(before.getValid(), () -> "violations: " + before.getViolationsList());
    assertFalse(before.getNameTaken());

    CreatePipelineRequest create = CreatePipelineRequest.newBuilder().setSpec(spec).build();
    Pipeline created = coordinator.createPipeline(create).getPipeline();
    assertEquals(1, created.getConfigVersion());
    // A second logical call (the client fills a new request_id) finds the name taken.
    LockgateException taken =
        assertThrows(LockgateException.class, () -> coordinator.createPipeline(create));
    assertEquals(Status.Code.ALREADY_EXISTS, taken.getStatus().getCode());
    assertTrue(
        coordinator
            .validatePipeline(ValidatePipelineRequest.newBuilder().setSpec(spec).build())
            .getNameTaken());

    JsonObject seen = cliPipeline(name);
    assertEquals("1", seen.get("config_version").getAsString());
    assertEquals("TARGET_STATE_RUNNING", seen.get("target_state").getAsString());
    assertEquals(
        name + "-out",
        seen.getAsJsonObject("spec")
            .getAsJsonObject("sink")
            .getAsJsonObject("kafka")
            .get("topic")
            .getAsString());
    assertEquals(
        created.getSpec(),
        coordinator
            .getPipeline(GetPipelineRequest.newBuilder().setName(name).build())
            .getPipeline()
            .getSpec());

    List<String> listed = new ArrayList<>();
    String token = "";
    do { // one page at a time, to walk page_token
      ListPipelinesResponse page =
          coordinator.listPipelines(
              ListPipelinesRequest.newBuilder().setPageSize(1).setPageToken(token).build());
      page.getPipelinesList().forEach(p -> listed.add(p.getName()));
      token = page.getNextPageToken();
    } while (!token.isEmpty());
    assertTrue(listed.contains(name), () -> name + " not in " + listed);

    UpdatePipelineRequest update =
        UpdatePipelineRequest.newBuilder()
            .setName(name)
            .setSpec(spec.toBuilder().setCheckpoint(CheckpointSpec.newBuilder().setIntervalMs(700)))
            .setUpdateMask(FieldMask.newBuilder().addPaths("checkpoint.interval_ms"))
            .setExpectedConfigVersion(1)
            .build();
    assertEquals(2, coordinator.updatePipeline(update).getPipeline().getConfigVersion());
    JsonObject updated = cliPipeline(name);
    assertEquals("2", updated.get("config_version").getAsString());
    assertEquals(
        "700",
        updated
            .getAsJsonObject("spec")
            .getAsJsonObject("checkpoint")
            .get("interval_ms")
            .getAsString());
    LockgateException stale =
        assertThrows(LockgateException.class, () -> coordinator.updatePipeline(update));
    assertEquals(Status.Code.ABORTED, stale.getStatus().getCode());

    delete(name);
    Cli.Result gone = cli.run(true, "pipeline", "get", name);
    assertNotEquals(0, gone.exitCode(), "the CLI still finds " + name + ": " + gone.stdout());
    List<String> after = new ArrayList<>();
    cli.json("pipeline", "list")
        .getAsJsonObject()
        .getAsJsonArray("pipelines")
        .forEach(p -> after.add(p.getAsJsonObject().get("name").getAsString()));
    assertFalse(after.contains(name), () -> name + " still listed: " + after);
  }

  @Test
  void targetStatesTasksCheckpointsAndOffsets() {
    String name = Specs.uniqueName("java-ops");
    create(Specs.copy(testbed, name));
    try {
      coordinator.pausePipeline(PausePipelineRequest.newBuilder().setName(name).build());
      assertEquals("TARGET_STATE_PAUSED", cliPipeline(name).get("target_state").getAsString());
      coordinator.resumePipeline(ResumePipelineRequest.newBuilder().setName(name).build());
      assertEquals("TARGET_STATE_RUNNING", cliPipeline(name).get("target_state").getAsString());

      // Tasks run and checkpoints commit (the executors' control-only data plane).
      GetPipelineStatusResponse running =
          Poll.until(
              WAIT,
              "both tasks RUNNING and a committed checkpoint",
              () -> {
                GetPipelineStatusResponse status = status(name);
                boolean allRunning =
                    status.getTasksCount() == 2
                        && status.getTasksList().stream()
                            .allMatch(t -> t.getState() == TaskState.TASK_STATE_RUNNING);
                return allRunning && status.getLastCommittedCheckpointId() > 0
                    ? Optional.of(status)
                    : Optional.empty();
              });
      long committed = running.getLastCommittedCheckpointId();
      List<Long> ids =
          coordinator
              .listCheckpoints(
                  ListCheckpointsRequest.newBuilder()
                      .setPipelineName(name)
                      .addStates(CheckpointState.CHECKPOINT_STATE_COMMITTED)
                      .build())
              .getCheckpointsList()
              .stream()
              .map(c -> c.getCheckpointId())
              .toList();
      assertTrue(ids.contains(committed), () -> committed + " not in " + ids);
      var checkpoint =
          coordinator
              .getCheckpoint(
                  GetCheckpointRequest.newBuilder()
                      .setPipelineName(name)
                      .setCheckpointId(committed)
                      .build())
              .getCheckpoint();
      assertEquals(CheckpointState.CHECKPOINT_STATE_COMMITTED, checkpoint.getState());
      assertEquals(2, checkpoint.getTasksCount());
      JsonObject seenCheckpoint =
          cli.json("pipeline", "checkpoints", name, "--id", Long.toString(committed))
              .getAsJsonObject();
      assertEquals("CHECKPOINT_STATE_COMMITTED", seenCheckpoint.get("state").getAsString());

      List<Task> tasks =
          coordinator
              .listTasks(ListTasksRequest.newBuilder().setPipelineName(name).build())
              .getTasksList();
      assertEquals(List.of(0, 1), tasks.stream().map(t -> t.getTaskId().getTaskIndex()).toList());
      // The coordinator does not restart single tasks yet: it answers UNIMPLEMENTED, pointing at
      // RestartPipeline, and the task keeps its generation.
      long generation = tasks.get(0).getTaskGeneration();
      LockgateException notYet =
          assertThrows(
              LockgateException.class,
              () ->
                  coordinator.restartTask(
                      RestartTaskRequest.newBuilder()
                          .setTaskId(TaskId.newBuilder().setPipelineName(name).setTaskIndex(0))
                          .build()));
      assertEquals(Status.Code.UNIMPLEMENTED, notYet.getStatus().getCode());
      assertTrue(notYet.getStatus().getDescription().contains("RestartPipeline"));
      assertEquals(generation, cliTaskGeneration(name, 0));
      var restart =
          coordinator.restartPipeline(
              RestartPipelineRequest.newBuilder().setName(name).setIncludeTasks(true).build());
      assertEquals(2, restart.getRestartedTasksCount());
      assertTrue(
          cliTaskGeneration(name, 0) > generation, "the CLI sees task 0 at a new generation");

      coordinator.stopPipeline(StopPipelineRequest.newBuilder().setName(name).build());
      assertEquals("TARGET_STATE_STOPPED", cliPipeline(name).get("target_state").getAsString());
      Poll.until(
          WAIT,
          "no checkpoint in flight after the stop",
          () -> status(name).getInFlightCheckpointIdsCount() == 0);
      PartitionOffset reset =
          PartitionOffset.newBuilder().setTopic(name + "-in").setPartition(1).setOffset(0).build();
      coordinator.resetOffsets(
          ResetOffsetsRequest.newBuilder()
              .setPipelineName(name)
              .setOffsets(PartitionOffsets.newBuilder().addOffsets(reset))
              .build());
      GetOffsetsResponse offsets =
          coordinator.getOffsets(GetOffsetsRequest.newBuilder().setPipelineName(name).build());
      assertTrue(offsets.getOffsetsList().contains(reset), () -> "offsets: " + offsets);
      JsonElement seenOffsets = cli.json("pipeline", "offsets", name);
      assertTrue(
          seenOffsets.toString().contains("\"topic\":\"" + name + "-in\""),
          () -> "CLI offsets: " + seenOffsets);
      assertEquals(
          "0",
          seenOffsets.getAsJsonObject().get("checkpoint_id").getAsString(),
          "offsets now come from the reset, not a checkpoint");
    } finally {
      delete(name);
    }
  }

  private static GetPipelineStatusResponse status(String name) {
    return coordinator.getPipelineStatus(
        GetPipelineStatusRequest.newBuilder().setName(name).build());
  }

  private static long cliTaskGeneration(String name, int index) {
    JsonObject status = cli.json("pipeline", "status", name).getAsJsonObject();
    for (JsonElement task : status.getAsJsonArray("tasks")) {
      JsonObject t = task.getAsJsonObject();
      if (t.getAsJsonObject("task_id").get("task_index").getAsInt() == index) {
        return t.get("task_generation").getAsLong();
      }
    }
    throw new AssertionError("the CLI shows no task " + index + " of " + name + ": " + status);
  }
}
