package dev.lockgate.client;

import com.google.protobuf.Message;
import io.grpc.Channel;
import io.grpc.Deadline;
import io.grpc.stub.AbstractStub;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;
import java.util.function.Function;

/**
 * How every RPC of the three service clients is made: the request gets its request_id ({@link
 * RequestIds}), the call gets one deadline ({@code timeout} from now), and {@link LeaderFollower}
 * sends it, retrying UNAVAILABLE within that deadline, on a blocking stub.
 *
 * @param <S> the generated blocking stub type of the service
 */
final class Calls<S extends AbstractStub<S>> {
  private final LeaderFollower follower;
  private final Function<Channel, S> stubs;
  private final Duration timeout;

  Calls(LeaderFollower follower, Function<Channel, S> stubs, Duration timeout) {
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("the call timeout must be > 0, got " + timeout);
    }
    this.follower = follower;
    this.stubs = stubs;
    this.timeout = timeout;
  }

  /** The same calls with another timeout per call. */
  Calls<S> withTimeout(Duration newTimeout) {
    return new Calls<>(follower, stubs, newTimeout);
  }

  /** The address calls go to now. */
  String currentAddress() {
    return follower.currentAddress();
  }

  /** {@code method(stub, request)} under the retry policy, with request_id and deadline. */
  <Q extends Message, R> R unary(Q request, BiFunction<S, Q, R> method) {
    Q sent = RequestIds.filled(request);
    Deadline deadline = Deadline.after(timeout.toNanos(), TimeUnit.NANOSECONDS);
    return follower.call(
        deadline, (channel, due) -> method.apply(stubs.apply(channel).withDeadline(due), sent));
  }
}
