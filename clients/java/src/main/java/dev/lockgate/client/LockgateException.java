package dev.lockgate.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Message;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.PreconditionFailure;
import com.google.rpc.ResourceInfo;
import com.google.rpc.RetryInfo;
import dev.lockgate.v1.FencingFailure;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.List;
import java.util.Optional;

/**
 * A failed Lockgate call: the gRPC status plus the {@code google.rpc} details the services send,
 * decoded. It is a {@link StatusRuntimeException}, so code that catches those keeps working; {@link
 * #getStatus()} gives the code.
 *
 * <ul>
 *   <li>{@link #fieldViolations()}: the {@code google.rpc.BadRequest} of an INVALID_ARGUMENT, one
 *       entry per bad field (e.g. {@code sink.kafka.topic}) with how to fix it;
 *   <li>{@link #fencingFailure()}: the {@code lockgate.v1.FencingFailure} of a FAILED_PRECONDITION
 *       refusing a stale leader epoch, executor or task generation;
 *   <li>{@link #errorInfo()}, {@link #preconditionFailure()}, {@link #resourceInfo()}, {@link
 *       #retryInfo()}: the other details, when sent;
 *   <li>{@link #leaderAddress()}: the {@code lockgate-leader} trailer of a follower's UNAVAILABLE.
 * </ul>
 */
public final class LockgateException extends StatusRuntimeException {
  private static final long serialVersionUID = 1L;

  /** The trailing metadata key a follower coordinator names the leader's address in. */
  public static final Metadata.Key<String> LEADER_KEY =
      Metadata.Key.of("lockgate-leader", Metadata.ASCII_STRING_MARSHALLER);

  private final transient com.google.rpc.Status statusProto;

  private LockgateException(Status status, Metadata trailers, com.google.rpc.Status statusProto) {
    super(status, trailers);
    this.statusProto = statusProto;
  }

  /** The Lockgate view of a failed call ({@code error} itself if it already is one). */
  public static LockgateException from(StatusRuntimeException error) {
    if (error instanceof LockgateException lockgate) {
      return lockgate;
    }
    Metadata trailers = error.getTrailers() == null ? new Metadata() : error.getTrailers();
    com.google.rpc.Status proto = StatusProto.fromStatusAndTrailers(error.getStatus(), trailers);
    return new LockgateException(error.getStatus().withCause(error), trailers, proto);
  }

  /** The whole {@code google.rpc.Status}: code, message and every detail as sent. */
  public com.google.rpc.Status statusProto() {
    return statusProto;
  }

  /** The bad fields of an INVALID_ARGUMENT (empty if none were named). */
  public List<BadRequest.FieldViolation> fieldViolations() {
    return detail(BadRequest.class).map(BadRequest::getFieldViolationsList).orElse(List.of());
  }

  /** The field paths of {@link #fieldViolations()}, e.g. {@code ["name", "tasks_max"]}. */
  public List<String> fieldPaths() {
    return fieldViolations().stream().map(BadRequest.FieldViolation::getField).toList();
  }

  /** The stale fencing token that made the receiver refuse the call, if that was why. */
  public Optional<FencingFailure> fencingFailure() {
    return detail(FencingFailure.class);
  }

  /** The machine-readable reason ({@code ErrorInfo.reason}, e.g. "NOT_LEADER"), if sent. */
  public Optional<ErrorInfo> errorInfo() {
    return detail(ErrorInfo.class);
  }

  /** The unmet preconditions of a FAILED_PRECONDITION, if sent. */
  public Optional<PreconditionFailure> preconditionFailure() {
    return detail(PreconditionFailure.class);
  }

  /** The resource a NOT_FOUND or ALREADY_EXISTS is about, if sent. */
  public Optional<ResourceInfo> resourceInfo() {
    return detail(ResourceInfo.class);
  }

  /** How long the server asks to wait before a retry, if it said. */
  public Optional<RetryInfo> retryInfo() {
    return detail(RetryInfo.class);
  }

  /** The leader's address a follower coordinator named, if this is its UNAVAILABLE. */
  public Optional<String> leaderAddress() {
    Metadata trailers = getTrailers();
    return Optional.ofNullable(trailers == null ? null : trailers.get(LEADER_KEY))
        .filter(address -> !address.isEmpty());
  }

  /** The first detail of type {@code type}, if the status carries one. */
  public <T extends Message> Optional<T> detail(Class<T> type) {
    for (Any any : statusProto.getDetailsList()) {
      if (any.is(type)) {
        try {
          return Optional.of(any.unpack(type));
        } catch (InvalidProtocolBufferException e) {
          return Optional.empty(); // a corrupt detail: the code and message still stand
        }
      }
    }
    return Optional.empty();
  }
}
