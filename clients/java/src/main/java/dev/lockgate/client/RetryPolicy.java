package dev.lockgate.client;

import java.time.Duration;

/**
 * How a call that fails with UNAVAILABLE is retried, always within its deadline.
 *
 * <p>A follower's answer naming the leader ({@code lockgate-leader}) is followed at once, at most
 * {@code maxRedirects} times per call. Any other UNAVAILABLE (connection refused, no leader elected
 * yet, a service starting) is retried on the next address after a pause that starts at {@code
 * initialBackoff} and doubles up to {@code maxBackoff}; the retries stop when the next pause would
 * end after the call's deadline, and the last UNAVAILABLE is thrown.
 *
 * @param initialBackoff the first pause between two attempts
 * @param maxBackoff the longest pause between two attempts
 * @param maxRedirects leader redirects followed at once per call; more count as failures
 */
public record RetryPolicy(Duration initialBackoff, Duration maxBackoff, int maxRedirects) {
  /** 100 ms doubling to 2 s, 3 redirects per call: the Python client's values. */
  public static final RetryPolicy DEFAULT =
      new RetryPolicy(Duration.ofMillis(100), Duration.ofSeconds(2), 3);

  /** Checks the values. */
  public RetryPolicy {
    if (initialBackoff.isNegative() || initialBackoff.isZero()) {
      throw new IllegalArgumentException("initialBackoff must be > 0, got " + initialBackoff);
    }
    if (maxBackoff.compareTo(initialBackoff) < 0) {
      throw new IllegalArgumentException(
          "maxBackoff (" + maxBackoff + ") must be >= initialBackoff (" + initialBackoff + ")");
    }
    if (maxRedirects < 0) {
      throw new IllegalArgumentException("maxRedirects must be >= 0, got " + maxRedirects);
    }
  }
}
