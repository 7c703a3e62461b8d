package dev.lockgate.client;

import io.grpc.CallCredentials;
import io.grpc.Metadata;
import io.grpc.SecurityLevel;
import io.grpc.Status;
import java.util.concurrent.Executor;
import java.util.function.Supplier;

/**
 * Per-call credentials: {@code authorization: Bearer <token>} on every call, the token read from a
 * supplier at each call (so a refreshed token is picked up). Refused on a plaintext channel, as
 * grpc's own token credentials are: a token sent in clear is a token given away.
 */
final class BearerToken extends CallCredentials {
  static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final Supplier<String> token;

  BearerToken(Supplier<String> token) {
    this.token = token;
  }

  @Override
  public void applyRequestMetadata(RequestInfo info, Executor executor, MetadataApplier applier) {
    if (info.getSecurityLevel() != SecurityLevel.PRIVACY_AND_INTEGRITY) {
      applier.fail(
          Status.UNAUTHENTICATED.withDescription(
              "refusing to send the bearer token over a plaintext channel to "
                  + info.getAuthority()
                  + "; call useTransportSecurity() on the LockgateClient builder"));
      return;
    }
    String value = token.get();
    if (value == null || value.isBlank()) {
      applier.fail(Status.UNAUTHENTICATED.withDescription("the bearer token supplier gave none"));
      return;
    }
    Metadata headers = new Metadata();
    headers.put(AUTHORIZATION, "Bearer " + value);
    applier.apply(headers);
  }
}
