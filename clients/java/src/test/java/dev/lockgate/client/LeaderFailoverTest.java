package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockgate.client.testbed.Pipelines;
import dev.lockgate.client.testbed.Poll;
import dev.lockgate.client.testbed.Specs;
import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.CheckpointTask;
import dev.lockgate.v1.CreatePipelineRequest;
import dev.lockgate.v1.FencingFailure;
import dev.lockgate.v1.FencingToken;
import dev.lockgate.v1.GetClusterInfoRequest;
import dev.lockgate.v1.GetClusterInfoResponse;
import dev.lockgate.v1.GetExecutorStatusRequest;
import dev.lockgate.v1.GetExecutorStatusResponse;
import dev.lockgate.v1.GetPipelineRequest;
import dev.lockgate.v1.PausePipelineRequest;
import dev.lockgate.v1.ResumePipelineRequest;
import dev.lockgate.v1.TargetState;
import dev.lockgate.v1.TaskId;
import dev.lockgate.v1.TriggerCheckpointRequest;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.Optional;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Leader following under a real failover: the leader coordinator is SIGKILLed while a loop of
 * leader-only calls runs, and no call fails within its deadline. Then the new leader's epoch fences
 * the old one at the executors.
 */
@ExtendWith(TestbedExtension.class)
class LeaderFailoverTest {
  /** Each call's deadline: room for the lease to expire and a new leader to be elected. */
  private static final Duration CALL_DEADLINE = Duration.ofSeconds(20);

  private static final int CALLS_BEFORE_KILL = 6;
  private static final int CALLS_UNDER_NEW_LEADER = 6;

  private static Testbed testbed;
  private static LockgateClient lockgate;

  @BeforeAll
  static void connect(Testbed shared) {
    testbed = shared;
    lockgate =
        LockgateClient.builder()
            .coordinators(shared.coordinators())
            .callTimeout(CALL_DEADLINE)
            .build();
  }

  @AfterAll
  static void close() {
    lockgate.close();
  }

  private static boolean refuses(String address) {
    int colon = address.lastIndexOf(':');
    try (Socket socket = new Socket()) {
      socket.connect(
          new InetSocketAddress(
              address.substring(0, colon), Integer.parseInt(address.substring(colon + 1))),
          1000);
      return false;
    } catch (IOException e) {
      return true;
    }
  }

  @Test
  void callsKeepSucceedingWhileTheLeaderIsKilled() {
    CoordinatorClient coordinator = lockgate.coordinator();
    String name = Specs.uniqueName("java-failover");
    coordinator.createPipeline(
        CreatePipelineRequest.newBuilder().setSpec(Specs.copy(testbed, name)).build());
    GetClusterInfoResponse before =
        coordinator.getClusterInfo(GetClusterInfoRequest.getDefaultInstance());
    String oldLeader = before.getLeaderAddress();
    ProcessHandle leaderProcess = ProcessHandle.of(testbed.pidOf(oldLeader)).orElseThrow();

    int call = 0;
    int callsUnderNewLeader = 0;
    long slowestMs = 0;
    long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
    while (callsUnderNewLeader < CALLS_UNDER_NEW_LEADER) {
      assertTrue(System.nanoTime() < deadline, "no new leader within 90 s");
      if (call == CALLS_BEFORE_KILL) {
        assertTrue(leaderProcess.destroyForcibly(), "SIGKILL the leader " + oldLeader);
        // Not isAlive(): the killed process stays a zombie until the testbed reaps it.
        Poll.until(
            Duration.ofSeconds(10), "the old leader's port to close", () -> refuses(oldLeader));
      }
      // A leader-only mutating call, then a read (any replica) of its effect.
      boolean pause = call % 2 == 0;
      long start = System.nanoTime();
      if (pause) {
        coordinator.pausePipeline(PausePipelineRequest.newBuilder().setName(name).build());
      } else {
        coordinator.resumePipeline(ResumePipelineRequest.newBuilder().setName(name).build());
      }
      TargetState state =
          coordinator
              .getPipeline(GetPipelineRequest.newBuilder().setName(name).build())
              .getPipeline()
              .getTargetState();
      slowestMs = Math.max(slowestMs, (System.nanoTime() - start) / 1_000_000);
      assertEquals(
          pause ? TargetState.TARGET_STATE_PAUSED : TargetState.TARGET_STATE_RUNNING, state);
      if (call > CALLS_BEFORE_KILL && !coordinator.currentAddress().equals(oldLeader)) {
        callsUnderNewLeader++;
      }
      call++;
    }
    System.out.printf(
        "leader failover: %d calls, none failed; slowest pause/resume + get %d ms%n",
        call, slowestMs);

    GetClusterInfoResponse after =
        coordinator.getClusterInfo(GetClusterInfoRequest.getDefaultInstance());
    assertNotEquals(oldLeader, after.getLeaderAddress());
    assertTrue(after.getLeaderEpoch().getEpoch() > before.getLeaderEpoch().getEpoch());
    Pipelines.stopAndDelete(coordinator, name);

    // The executors learn the new epoch and refuse the old leader's from then on.
    ExecutorClient executor = lockgate.executor(testbed.executors().get(0));
    GetExecutorStatusResponse status =
        Poll.until(
            Duration.ofSeconds(20),
            "the executor to see the new leader epoch",
            () -> {
              GetExecutorStatusResponse s =
                  executor.getExecutorStatus(GetExecutorStatusRequest.getDefaultInstance());
              return s.getHighestLeaderEpochSeen().getEpoch() >= after.getLeaderEpoch().getEpoch()
                  ? Optional.of(s)
                  : Optional.empty();
            });
    LockgateException refused =
        assertThrows(
            LockgateException.class,
            () ->
                executor.triggerCheckpoint(
                    TriggerCheckpointRequest.newBuilder()
                        .setLeaderEpoch(before.getLeaderEpoch())
                        .setExecutorId(status.getExecutorId())
                        .setExecutorGeneration(status.getExecutorGeneration())
                        .setPipelineName(name)
                        .setCheckpointId(1)
                        .setConfigVersion(1)
                        .setTimeoutMs(1000)
                        .addTasks(
                            CheckpointTask.newBuilder()
                                .setTaskId(TaskId.newBuilder().setPipelineName(name))
                                .setTaskGeneration(1))
                        .build()));
    FencingFailure failure = ExecutorProtocolTest.fencingFailure(refused);
    assertEquals(FencingToken.FENCING_TOKEN_LEADER_EPOCH, failure.getToken());
    assertEquals(before.getLeaderEpoch().getEpoch(), failure.getPresented());
    assertEquals(status.getHighestLeaderEpochSeen().getEpoch(), failure.getCurrent());
  }
}
