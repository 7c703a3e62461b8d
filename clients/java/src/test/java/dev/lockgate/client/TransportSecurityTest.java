package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.CoordinatorServiceGrpc;
import dev.lockgate.v1.GetClusterInfoRequest;
import dev.lockgate.v1.GetClusterInfoResponse;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.TlsServerCredentials;
import io.grpc.stub.StreamObserver;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.KeyManagerFactory;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * TLS and the bearer token. Lockgate's services serve plaintext until the trust-boundary work
 * lands, so the TLS side is a real gRPC server in this JVM with a certificate made by keytool for
 * 127.0.0.1, serving CoordinatorService and recording the authorization header it gets.
 */
@ExtendWith(TestbedExtension.class)
class TransportSecurityTest {
  private static final char[] PASSWORD = "changeit".toCharArray();

  @TempDir static Path keys;
  private static Server server;
  private static String address;
  private static Path certificatePem;
  private static final List<String> authorizations = new CopyOnWriteArrayList<>();

  private static void keytool(String... args) throws Exception {
    List<String> command = new java.util.ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "keytool").toString());
    command.addAll(List.of(args));
    Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
    String output = new String(process.getInputStream().readAllBytes());
    assertTrue(process.waitFor(60, TimeUnit.SECONDS) && process.exitValue() == 0, output);
  }

  @BeforeAll
  static void startTlsServer() throws Exception {
    Path keyStore = keys.resolve("server.p12");
    keytool(
        "-genkeypair",
        "-alias",
        "server",
        "-keyalg",
        "EC",
        "-groupname",
        "secp256r1",
        "-dname",
        "CN=127.0.0.1",
        "-ext",
        "SAN=ip:127.0.0.1",
        "-validity",
        "2",
        "-storetype",
        "PKCS12",
        "-keystore",
        keyStore.toString(),
        "-storepass",
        new String(PASSWORD),
        "-keypass",
        new String(PASSWORD));
    certificatePem = keys.resolve("server.pem");
    keytool(
        "-exportcert",
        "-rfc",
        "-alias",
        "server",
        "-keystore",
        keyStore.toString(),
        "-storepass",
        new String(PASSWORD),
        "-file",
        certificatePem.toString());

    KeyStore store = KeyStore.getInstance("PKCS12");
    try (InputStream in = Files.newInputStream(keyStore)) {
      store.load(in, PASSWORD);
    }
    KeyManagerFactory keyManagers =
        KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    keyManagers.init(store, PASSWORD);
    ServerInterceptor recordAuthorization =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
            authorizations.add(String.valueOf(headers.get(BearerToken.AUTHORIZATION)));
            return next.startCall(call, headers);
          }
        };
    CoordinatorServiceGrpc.CoordinatorServiceImplBase coordinator =
        new CoordinatorServiceGrpc.CoordinatorServiceImplBase() {
          @Override
          public void getClusterInfo(
              GetClusterInfoRequest request, StreamObserver<GetClusterInfoResponse> response) {
            response.onNext(GetClusterInfoResponse.newBuilder().setResponderId("tls").build());
            response.onCompleted();
          }
        };
    server =
        Grpc.newServerBuilderForPort(
                0,
                TlsServerCredentials.newBuilder().keyManager(keyManagers.getKeyManagers()).build())
            .addService(ServerInterceptors.intercept(coordinator, recordAuthorization))
            .build()
            .start();
    address = "127.0.0.1:" + server.getPort();
  }

  @AfterAll
  static void stopTlsServer() throws InterruptedException {
    server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
  }

  @Test
  void tlsWithCaFileSendsTheBearerToken() {
    authorizations.clear();
    try (LockgateClient lockgate =
        LockgateClient.builder()
            .coordinators(address)
            .trustCertificates(certificatePem)
            .bearerToken("s3cret")
            .build()) {
      var info = lockgate.coordinator().getClusterInfo(GetClusterInfoRequest.getDefaultInstance());
      assertEquals("tls", info.getResponderId());
    }
    assertEquals(List.of("Bearer s3cret"), authorizations);
  }

  @Test
  void tlsWithTrustStore() throws Exception {
    KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
    trust.load(null, null);
    try (InputStream in = Files.newInputStream(certificatePem)) {
      trust.setCertificateEntry(
          "lockgate", CertificateFactory.getInstance("X.509").generateCertificate(in));
    }
    try (LockgateClient lockgate =
        LockgateClient.builder().coordinators(address).trustStore(trust).build()) {
      assertEquals(
          "tls",
          lockgate
              .coordinator()
              .getClusterInfo(GetClusterInfoRequest.getDefaultInstance())
              .getResponderId());
    }
  }

  @Test
  void anUntrustedServerIsRefused() {
    try (LockgateClient lockgate =
        LockgateClient.builder()
            .coordinators(address)
            .useTransportSecurity() // the JVM's default CAs do not include keytool's certificate
            .callTimeout(java.time.Duration.ofSeconds(2))
            .build()) {
      LockgateException error =
          assertThrows(
              LockgateException.class,
              () ->
                  lockgate
                      .coordinator()
                      .getClusterInfo(GetClusterInfoRequest.getDefaultInstance()));
      assertEquals(Status.Code.UNAVAILABLE, error.getStatus().getCode());
    }
  }

  @Test
  void aBearerTokenIsNeverSentInClear(Testbed testbed) {
    try (LockgateClient lockgate =
        LockgateClient.builder()
            .coordinators(testbed.coordinators())
            .bearerToken("s3cret")
            .build()) {
      LockgateException error =
          assertThrows(
              LockgateException.class,
              () ->
                  lockgate
                      .coordinator()
                      .getClusterInfo(GetClusterInfoRequest.getDefaultInstance()));
      assertEquals(Status.Code.UNAUTHENTICATED, error.getStatus().getCode());
      assertTrue(error.getStatus().getDescription().contains("useTransportSecurity()"));
    }
  }
}
