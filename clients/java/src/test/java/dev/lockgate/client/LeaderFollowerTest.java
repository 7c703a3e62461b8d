package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Deadline;
import io.grpc.InsecureChannelCredentials;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * Which failures {@link LeaderFollower} sends again, with the attempt's outcome given (no server:
 * the channels are opened lazily and never used). The real failovers are {@link
 * LeaderFailoverTest}'s.
 */
class LeaderFollowerTest {
  private static final RetryPolicy QUICK =
      new RetryPolicy(Duration.ofMillis(1), Duration.ofMillis(1), 3);

  /** grpc-java's failure of a call started on a connection its dead peer just closed. */
  private static StatusRuntimeException channelClosed() {
    ClosedChannelException closed = new ClosedChannelException();
    return Status.UNKNOWN
        .withDescription("channel closed")
        .withCause(new IllegalStateException("transport failed", closed))
        .asRuntimeException();
  }

  private static <T> T callWith(AtomicInteger attempts, List<Object> outcomes) {
    try (ChannelPool pool = new ChannelPool(InsecureChannelCredentials.create(), null, List.of())) {
      LeaderFollower follower = new LeaderFollower(List.of("127.0.0.1:1"), pool, QUICK);
      return follower.call(
          Deadline.after(5, TimeUnit.SECONDS),
          (channel, deadline) -> {
            Object outcome = outcomes.get(attempts.getAndIncrement());
            if (outcome instanceof StatusRuntimeException error) {
              throw error;
            }
            @SuppressWarnings("unchecked")
            T result = (T) outcome;
            return result;
          });
    }
  }

  @Test
  void aCallWhoseConnectionClosedUnderItIsSentAgain() {
    AtomicInteger attempts = new AtomicInteger();
    String answer = callWith(attempts, List.of(channelClosed(), "answered"));
    assertEquals("answered", answer);
    assertEquals(2, attempts.get());
  }

  @Test
  void anyOtherUnknownFailsAtOnce() {
    AtomicInteger attempts = new AtomicInteger();
    StatusRuntimeException other =
        Status.UNKNOWN
            .withDescription("the server's own error")
            .withCause(new IOException("not a closed connection"))
            .asRuntimeException();
    LockgateException thrown =
        assertThrows(LockgateException.class, () -> callWith(attempts, List.of(other, "never")));
    assertEquals(Status.Code.UNKNOWN, thrown.getStatus().getCode());
    assertEquals(1, attempts.get());
  }

  @Test
  void onlyUnknownWithAClosedChannelAmongItsCausesCountsAsAClosedConnection() {
    assertTrue(LeaderFollower.connectionClosed(channelClosed()));
    assertFalse(
        LeaderFollower.connectionClosed(
            Status.UNKNOWN.withCause(new IOException("reset")).asRuntimeException()));
    assertFalse(
        LeaderFollower.connectionClosed(
            Status.INTERNAL.withCause(new ClosedChannelException()).asRuntimeException()));
  }
}
