package dev.lockgate.client.testbed;

import dev.lockgate.client.CoordinatorClient;
import dev.lockgate.v1.DeletePipelineRequest;
import dev.lockgate.v1.GetPipelineStatusRequest;
import dev.lockgate.v1.StopPipelineRequest;
import java.time.Duration;

/** Removing a test's pipeline. */
public final class Pipelines {
  private Pipelines() {}

  /**
   * Stops the pipeline, waits until no checkpoint of it is in flight, then deletes it. Deleting a
   * running pipeline races with its checkpoints in the coordinator: a checkpoint that becomes
   * COMPLETE meanwhile makes DeletePipeline fail with FAILED_PRECONDITION ("checkpoint cannot go
   * from COMPLETE to ABORTED"), a service bug reported with this client; stopping first avoids it.
   */
  public static void stopAndDelete(CoordinatorClient coordinator, String name) {
    coordinator.stopPipeline(StopPipelineRequest.newBuilder().setName(name).build());
    Poll.until(
        Duration.ofSeconds(30),
        "no checkpoint of " + name + " in flight",
        () ->
            coordinator
                    .getPipelineStatus(GetPipelineStatusRequest.newBuilder().setName(name).build())
                    .getInFlightCheckpointIdsCount()
                == 0);
    coordinator.deletePipeline(DeletePipelineRequest.newBuilder().setName(name).build());
  }
}
