package dev.lockgate.client;

import io.grpc.CallCredentials;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.CompositeChannelCredentials;
import io.grpc.Grpc;
import io.grpc.ManagedChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * One gRPC channel per address, opened on first use with the client's transport security and
 * credentials, and closed together. Settings as the Python client's CHANNEL_OPTIONS: keepalive
 * pings every 30 s (a dead peer is noticed in seconds), 64 MiB messages, and gRPC's own retries
 * off, since {@link LeaderFollower} retries with knowledge of leader redirects.
 */
final class ChannelPool implements AutoCloseable {
  private static final int MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

  private final ChannelCredentials credentials;
  private final List<ClientInterceptor> interceptors;
  private final Map<String, ManagedChannel> channels = new ConcurrentHashMap<>();
  private volatile boolean closed;

  ChannelPool(
      ChannelCredentials transport, CallCredentials perCall, List<ClientInterceptor> interceptors) {
    this.credentials =
        perCall == null ? transport : CompositeChannelCredentials.create(transport, perCall);
    this.interceptors = List.copyOf(interceptors);
  }

  /** The channel to {@code address} (HOST:PORT), opened on first use. */
  Channel channel(String address) {
    if (closed) {
      throw new IllegalStateException("the Lockgate client is closed");
    }
    ManagedChannel channel = channels.computeIfAbsent(address, this::open);
    return ClientInterceptors.intercept(channel, interceptors);
  }

  private ManagedChannel open(String address) {
    return Grpc.newChannelBuilder(address, credentials)
        .keepAliveTime(30, TimeUnit.SECONDS)
        .keepAliveTimeout(10, TimeUnit.SECONDS)
        .keepAliveWithoutCalls(true)
        .maxInboundMessageSize(MAX_MESSAGE_BYTES)
        .disableRetry()
        .build();
  }

  /** Closes every channel, waiting up to 5 s for calls in flight to finish. */
  @Override
  public void close() {
    closed = true;
    List<ManagedChannel> open = new ArrayList<>(channels.values());
    channels.clear();
    open.forEach(ManagedChannel::shutdown);
    try {
      for (ManagedChannel channel : open) {
        if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
          channel.shutdownNow();
        }
      }
    } catch (InterruptedException e) {
      open.forEach(ManagedChannel::shutdownNow);
      Thread.currentThread().interrupt();
    }
  }
}
