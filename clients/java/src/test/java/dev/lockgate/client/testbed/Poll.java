package dev.lockgate.client.testbed;

import java.time.Duration;
import java.util.Optional;
import java.util.function.Supplier;

/** Waiting for a condition with a deadline (never a fixed sleep as synchronisation). */
public final class Poll {
  private Poll() {}

  /**
   * The first present value {@code probe} gives within {@code timeout}; fails naming {@code what}.
   */
  public static <T> T until(Duration timeout, String what, Supplier<Optional<T>> probe) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      Optional<T> value = probe.get();
      if (value.isPresent()) {
        return value.get();
      }
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out after " + timeout + " waiting for " + what);
      }
      try {
        Thread.sleep(100); // the polling interval
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted waiting for " + what, e);
      }
    }
  }

  /** Waits until {@code condition} holds. */
  public static void until(
      Duration timeout, String what, java.util.function.BooleanSupplier condition) {
    until(timeout, what, () -> condition.getAsBoolean() ? Optional.of(true) : Optional.empty());
  }
}
