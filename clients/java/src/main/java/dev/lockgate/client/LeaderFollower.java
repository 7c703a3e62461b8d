package dev.lockgate.client;

import io.grpc.Channel;
import io.grpc.Deadline;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.nio.channels.ClosedChannelException;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BiFunction;

/**
 * Sends each call to the current leader among a service's addresses, the Java twin of the Python
 * client's {@code LeaderFollowingChannel} (common/lockgate/common/grpc_client.py). Retries are
 * bounded by the call's deadline (every call has one, see {@link Calls}), so a call outlives a
 * leader failover when its deadline allows.
 *
 * <p>An attempt that fails with UNAVAILABLE and a {@code lockgate-leader} trailer naming another
 * address moves the calls there and is resent at once (at most {@link RetryPolicy#maxRedirects()}
 * times per call). Any other UNAVAILABLE moves to the next seed address (or back to the first, from
 * a leader learned by redirect) after a capped exponential pause. So does UNKNOWN caused by the
 * connection being closed under the call ({@link #connectionClosed}): grpc-java's Netty transport
 * reports a call started on a connection that its peer's death just closed as {@code UNKNOWN:
 * channel closed}, not UNAVAILABLE (grpc/grpc-java#10120), and a leader SIGKILLed between two
 * calls left the next one failing that way. Every attempt shares the call's one deadline. Every
 * other status fails the call at once. Mutating calls carry one request_id
 * across their attempts ({@link RequestIds}); the schema registry answers a repeat with its first
 * answer, the coordinators' verbs are idempotent by state, except CreatePipeline, whose retry
 * after a lost answer reads ALREADY_EXISTS (the coordinators do not deduplicate by request_id
 * yet).
 */
final class LeaderFollower {
  private final List<String> seeds;
  private final ChannelPool channels;
  private final RetryPolicy policy;
  private final AtomicReference<String> current;

  LeaderFollower(List<String> seeds, ChannelPool channels, RetryPolicy policy) {
    if (seeds.isEmpty()) {
      throw new IllegalArgumentException("no address given; pass at least one HOST:PORT");
    }
    this.seeds = List.copyOf(seeds);
    this.channels = channels;
    this.policy = policy;
    this.current = new AtomicReference<>(this.seeds.get(0));
  }

  /** The address calls go to now: the last known leader, or a seed. */
  String currentAddress() {
    return current.get();
  }

  /**
   * Runs {@code attempt.apply(channel, deadline)} under the policy above and returns its result; a
   * failure is thrown as a {@link LockgateException}.
   */
  <T> T call(Deadline deadline, BiFunction<Channel, Deadline, T> attempt) {
    int redirects = 0;
    long backoffNanos = policy.initialBackoff().toNanos();
    while (true) {
      String address = current.get();
      try {
        return attempt.apply(channels.channel(address), deadline);
      } catch (StatusRuntimeException error) {
        LockgateException failure = LockgateException.from(error);
        Status.Code code = failure.getStatus().getCode();
        if (code != Status.Code.UNAVAILABLE && !connectionClosed(error)) {
          throw failure;
        }
        Optional<String> leader = failure.leaderAddress();
        if (leader.isPresent()
            && !leader.get().equals(address)
            && redirects < policy.maxRedirects()) {
          redirects++;
          current.compareAndSet(address, leader.get());
          continue;
        }
        long pause = Math.min(backoffNanos, policy.maxBackoff().toNanos());
        if (deadline.timeRemaining(TimeUnit.NANOSECONDS) <= pause) {
          throw failure;
        }
        moveOn(address);
        sleep(pause);
        backoffNanos = Math.min(backoffNanos * 2, policy.maxBackoff().toNanos());
      }
    }
  }

  /**
   * Whether a call failed UNKNOWN because its connection was closed under it: a {@link
   * ClosedChannelException} among the causes, which is how grpc-java's Netty transport says "the
   * connection died" on some paths. Retried as UNAVAILABLE is, with the same caveat: the request
   * may have reached the server before the connection closed.
   */
  static boolean connectionClosed(StatusRuntimeException error) {
    if (error.getStatus().getCode() != Status.Code.UNKNOWN) {
      return false;
    }
    for (Throwable cause = error.getCause(); cause != null; cause = cause.getCause()) {
      if (cause instanceof ClosedChannelException) {
        return true;
      }
    }
    return false;
  }

  /**
   * After a failure at {@code from}: the next seed (round robin), or the first seed when {@code
   * from} was a leader learned by redirect; nothing if another call moved on already.
   */
  private void moveOn(String from) {
    int index = seeds.indexOf(from);
    String next = index < 0 ? seeds.get(0) : seeds.get((index + 1) % seeds.size());
    current.compareAndSet(from, next);
  }

  /** The pause between two attempts of a failed call (a back-off, not synchronisation). */
  private static void sleep(long nanos) {
    try {
      TimeUnit.NANOSECONDS.sleep(nanos);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw LockgateException.from(
          Status.CANCELLED
              .withDescription("interrupted while waiting to retry after UNAVAILABLE")
              .withCause(e)
              .asRuntimeException());
    }
  }
}
