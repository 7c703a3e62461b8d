package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.GetClusterInfoRequest;
import io.grpc.Status;
import java.io.IOException;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** Retries of UNAVAILABLE: a dead address is skipped, and retrying stops at the deadline. */
@ExtendWith(TestbedExtension.class)
class RetryTest {
  /** An address nothing listens on (a port just bound and released). */
  private static String deadAddress() throws IOException {
    try (ServerSocket socket = new ServerSocket(0)) {
      return "127.0.0.1:" + socket.getLocalPort();
    }
  }

  @Test
  void aDeadFirstAddressIsSkipped(Testbed testbed) throws IOException {
    List<String> seeds = new ArrayList<>(List.of(deadAddress()));
    seeds.addAll(testbed.coordinators());
    try (LockgateClient lockgate = LockgateClient.builder().coordinators(seeds).build()) {
      var info = lockgate.coordinator().getClusterInfo(GetClusterInfoRequest.getDefaultInstance());
      assertTrue(info.getLeaderEpoch().getEpoch() >= 1);
      assertTrue(testbed.coordinators().contains(lockgate.coordinator().currentAddress()));
    }
  }

  @Test
  void unavailableIsRetriedUntilTheDeadlineThenThrown() throws IOException {
    Duration deadline = Duration.ofMillis(1500);
    try (LockgateClient lockgate =
        LockgateClient.builder().coordinators(deadAddress()).callTimeout(deadline).build()) {
      long start = System.nanoTime();
      LockgateException error =
          assertThrows(
              LockgateException.class,
              () ->
                  lockgate
                      .coordinator()
                      .getClusterInfo(GetClusterInfoRequest.getDefaultInstance()));
      long elapsedMs = (System.nanoTime() - start) / 1_000_000;
      assertEquals(Status.Code.UNAVAILABLE, error.getStatus().getCode());
      // Backoff 100, 200, 400 ms (and 800, if it still fits): retried for most of the deadline,
      // given up before it rather than after.
      assertTrue(elapsedMs >= 600, "gave up after " + elapsedMs + " ms");
      assertTrue(elapsedMs <= deadline.toMillis() + 500, "went on for " + elapsedMs + " ms");
    }
  }
}
