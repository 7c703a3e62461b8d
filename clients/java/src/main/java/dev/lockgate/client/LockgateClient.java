package dev.lockgate.client;

import dev.lockgate.v1.CoordinatorServiceGrpc;
import dev.lockgate.v1.ExecutorServiceGrpc;
import dev.lockgate.v1.SchemaRegistryServiceGrpc;
import io.grpc.CallCredentials;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptor;
import io.grpc.InsecureChannelCredentials;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.AbstractStub;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.function.Function;
import java.util.function.Supplier;
import javax.net.ssl.TrustManagerFactory;

/**
 * A connection to a Lockgate cluster: its coordinators (several addresses, the leader followed),
 * its schema registry, and any executor. It owns one gRPC channel per address; close it when done.
 *
 * <pre>{@code
 * try (LockgateClient lockgate = LockgateClient.builder()
 *     .coordinators("127.0.0.1:7070", "127.0.0.1:7071", "127.0.0.1:7072")
 *     .schemaRegistry("127.0.0.1:7090")
 *     .build()) {
 *   lockgate.coordinator().getClusterInfo(GetClusterInfoRequest.getDefaultInstance());
 * }
 * }</pre>
 *
 * <p>Plaintext by default (the services serve plaintext until the trust-boundary work lands);
 * {@link Builder#useTransportSecurity()} and its trust options switch every channel to TLS, and
 * {@link Builder#bearerToken} adds {@code authorization: Bearer ...} to every call (TLS only).
 */
public final class LockgateClient implements AutoCloseable {
  /** The deadline of each call unless {@link Builder#callTimeout} says otherwise. */
  public static final Duration DEFAULT_CALL_TIMEOUT = Duration.ofSeconds(15);

  private final ChannelPool channels;
  private final String schemaRegistry;
  private final RetryPolicy retryPolicy;
  private final Duration callTimeout;

  /** Shared by every CoordinatorClient of this client, so all follow one known leader. */
  private final LeaderFollower coordinatorFollower;

  private LockgateClient(Builder builder, ChannelPool channels) {
    this.channels = channels;
    this.schemaRegistry = builder.schemaRegistry;
    this.retryPolicy = builder.retryPolicy;
    this.callTimeout = builder.callTimeout;
    this.coordinatorFollower =
        builder.coordinators.isEmpty()
            ? null
            : new LeaderFollower(builder.coordinators, channels, retryPolicy);
  }

  /** A builder; give it at least the coordinators' or the registry's address. */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * The CoordinatorService of the coordinators given to the builder, following their leader. Each
   * call returns a client sharing the channels and the known leader.
   */
  public CoordinatorClient coordinator() {
    if (coordinatorFollower == null) {
      throw new IllegalStateException(
          "no coordinator address given; call coordinators(\"HOST:PORT\", ...) on the builder");
    }
    return new CoordinatorClient(
        calls(coordinatorFollower, CoordinatorServiceGrpc::newBlockingStub));
  }

  /** The SchemaRegistryService at the address given to {@link Builder#schemaRegistry}. */
  public SchemaRegistryClient schemaRegistry() {
    if (schemaRegistry == null) {
      throw new IllegalStateException(
          "no schema registry address given; call schemaRegistry(\"HOST:PORT\") on the builder");
    }
    LeaderFollower follower = new LeaderFollower(List.of(schemaRegistry), channels, retryPolicy);
    return new SchemaRegistryClient(calls(follower, SchemaRegistryServiceGrpc::newBlockingStub));
  }

  /** The ExecutorService of the executor at {@code address} (HOST:PORT). */
  public ExecutorClient executor(String address) {
    LeaderFollower follower =
        new LeaderFollower(List.of(Builder.checkedAddress(address)), channels, retryPolicy);
    return new ExecutorClient(calls(follower, ExecutorServiceGrpc::newBlockingStub));
  }

  private <S extends AbstractStub<S>> Calls<S> calls(
      LeaderFollower follower, Function<Channel, S> stubs) {
    return new Calls<>(follower, stubs, callTimeout);
  }

  /** Closes every channel. */
  @Override
  public void close() {
    channels.close();
  }

  /** Addresses, security and retry settings of a {@link LockgateClient}. */
  public static final class Builder {
    private final List<String> coordinators = new ArrayList<>();
    private String schemaRegistry;
    private boolean tls;
    private TlsChannelCredentials.Builder tlsCredentials;
    private Supplier<String> bearerToken;
    private RetryPolicy retryPolicy = RetryPolicy.DEFAULT;
    private Duration callTimeout = DEFAULT_CALL_TIMEOUT;
    private final List<ClientInterceptor> interceptors = new ArrayList<>();

    private Builder() {}

    /**
     * The coordinator replicas' addresses (HOST:PORT), in the order they are tried; any one of them
     * is enough to find the leader, all of them survive a replica's death.
     */
    public Builder coordinators(String... addresses) {
      return coordinators(Arrays.asList(addresses));
    }

    /** As {@link #coordinators(String...)}; also takes a comma-separated list as one entry. */
    public Builder coordinators(List<String> addresses) {
      for (String entry : addresses) {
        for (String address : entry.split(",")) {
          if (!address.isBlank()) {
            coordinators.add(checkedAddress(address.strip()));
          }
        }
      }
      return this;
    }

    /** The schema registry's gRPC address (HOST:PORT). */
    public Builder schemaRegistry(String address) {
      this.schemaRegistry = checkedAddress(address);
      return this;
    }

    /** TLS on every channel, trusting the JVM's default trust store unless told otherwise. */
    public Builder useTransportSecurity() {
      tls = true;
      if (tlsCredentials == null) {
        tlsCredentials = TlsChannelCredentials.newBuilder();
      }
      return this;
    }

    /** TLS, trusting the CA certificates in a PEM file (e.g. the cluster's own CA). */
    public Builder trustCertificates(Path caCertificatesPem) {
      useTransportSecurity();
      try {
        tlsCredentials.trustManager(caCertificatesPem.toFile());
      } catch (IOException e) {
        throw new UncheckedIOException("cannot read CA certificates " + caCertificatesPem, e);
      }
      return this;
    }

    /** TLS, trusting the certificates of a trust store (JKS or PKCS12, already loaded). */
    public Builder trustStore(KeyStore trustStore) {
      useTransportSecurity();
      try {
        TrustManagerFactory factory =
            TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        factory.init(trustStore);
        tlsCredentials.trustManager(factory.getTrustManagers());
      } catch (GeneralSecurityException e) {
        throw new IllegalArgumentException("cannot use the trust store: " + e.getMessage(), e);
      }
      return this;
    }

    /** TLS with a client certificate (mutual TLS): PEM certificate chain and PKCS#8 key. */
    public Builder clientCertificate(Path certificateChainPem, Path privateKeyPem) {
      useTransportSecurity();
      try {
        tlsCredentials.keyManager(certificateChainPem.toFile(), privateKeyPem.toFile());
      } catch (IOException e) {
        throw new UncheckedIOException(
            "cannot read client certificate " + certificateChainPem + " or key " + privateKeyPem,
            e);
      }
      return this;
    }

    /** {@code authorization: Bearer <token>} on every call; needs transport security. */
    public Builder bearerToken(String token) {
      if (token == null || token.isBlank()) {
        throw new IllegalArgumentException("the bearer token is empty");
      }
      return bearerToken(() -> token);
    }

    /** As {@link #bearerToken(String)}, the token asked from {@code token} at each call. */
    public Builder bearerToken(Supplier<String> token) {
      this.bearerToken = token;
      return this;
    }

    /** The deadline of each call, from its start, all its retries included (default 15 s). */
    public Builder callTimeout(Duration timeout) {
      this.callTimeout = timeout;
      return this;
    }

    /** How UNAVAILABLE is retried (default {@link RetryPolicy#DEFAULT}). */
    public Builder retryPolicy(RetryPolicy policy) {
      this.retryPolicy = policy;
      return this;
    }

    /** Interceptors run on every attempt of every call (e.g. tracing), first given first. */
    public Builder intercept(ClientInterceptor... more) {
      interceptors.addAll(Arrays.asList(more));
      return this;
    }

    /** The client; it opens each channel on its first call. */
    public LockgateClient build() {
      if (coordinators.isEmpty() && schemaRegistry == null) {
        throw new IllegalStateException(
            "give coordinators(\"HOST:PORT\", ...) or schemaRegistry(\"HOST:PORT\") (or both)");
      }
      if (callTimeout.isNegative() || callTimeout.isZero()) {
        throw new IllegalArgumentException("callTimeout must be > 0, got " + callTimeout);
      }
      ChannelCredentials transport =
          tls ? tlsCredentials.build() : InsecureChannelCredentials.create();
      CallCredentials perCall = bearerToken == null ? null : new BearerToken(bearerToken);
      // ClientInterceptors.intercept runs the last one first: reverse to keep the given order.
      List<ClientInterceptor> ordered = new ArrayList<>(interceptors);
      Collections.reverse(ordered);
      return new LockgateClient(this, new ChannelPool(transport, perCall, ordered));
    }

    static String checkedAddress(String address) {
      if (address == null || address.isBlank()) {
        throw new IllegalArgumentException("empty address; use HOST:PORT, e.g. 127.0.0.1:7070");
      }
      int colon = address.lastIndexOf(':');
      if (colon <= 0 || colon == address.length() - 1) {
        throw new IllegalArgumentException(
            "address " + address + " has no port; use HOST:PORT, e.g. 127.0.0.1:7070");
      }
      return address;
    }
  }
}
