package dev.lockgate.client.testbed;

import com.google.gson.Gson;
import com.google.gson.JsonObject;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A whole Lockgate on free ports: {@code python -m lockgate.localcluster.testbed --home DIR} (a
 * Kafka broker, the schema registry, three coordinators, two executors with {@code --data-plane
 * none}), started as a child process. Its first stdout line is the JSON of its addresses and pids;
 * closing its stdin stops every process it started.
 */
public final class Testbed implements AutoCloseable {
  /** How long the services get to start (Kafka's first format included). */
  private static final Duration START_TIMEOUT = Duration.ofSeconds(150);

  private final Process process;
  private final Path home;
  private final JsonObject description;

  private Testbed(Process process, Path home, JsonObject description) {
    this.process = process;
    this.home = home;
    this.description = description;
  }

  /** The Python that runs Lockgate: $LOCKGATE_PYTHON, else {@code python} on the PATH. */
  public static String python() {
    String configured = System.getenv("LOCKGATE_PYTHON");
    return configured == null || configured.isBlank() ? "python" : configured;
  }

  /**
   * Starts a testbed in a new home under target/ (its logs next to Surefire's reports, removed by
   * {@code mvn clean}) and waits for its JSON line.
   */
  public static Testbed start() throws IOException {
    Path target = Path.of(System.getProperty("basedir", "."), "target");
    Files.createDirectories(target);
    Path home = Files.createTempDirectory(target, "testbed-");
    Process process =
        new ProcessBuilder(
                python(), "-m", "lockgate.localcluster.testbed", "--home", home.toString())
            .redirectError(home.resolve("testbed.stderr").toFile())
            .start();
    BufferedReader stdout =
        new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    CompletableFuture<String> firstLine =
        CompletableFuture.supplyAsync(
            () -> {
              try {
                return stdout.readLine();
              } catch (IOException e) {
                throw new UncheckedIOException(e);
              }
            });
    String line;
    try {
      line = firstLine.get(START_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
    } catch (InterruptedException | ExecutionException | TimeoutException e) {
      process.destroy();
      throw new IllegalStateException(
          "the testbed did not start within " + START_TIMEOUT + ": " + stderr(home), e);
    }
    if (line == null) {
      throw new IllegalStateException(
          "the testbed exited before printing its addresses (is `"
              + python()
              + "` the venv's python? set $LOCKGATE_PYTHON): "
              + stderr(home));
    }
    return new Testbed(process, home, new Gson().fromJson(line, JsonObject.class));
  }

  private static String stderr(Path home) {
    try {
      return Files.readString(home.resolve("testbed.stderr"));
    } catch (IOException e) {
      return "(no stderr: " + e.getMessage() + ")";
    }
  }

  /** The coordinators' addresses (HOST:PORT), c1 first. */
  public List<String> coordinators() {
    return strings("coordinators");
  }

  /** The executors' addresses, e1 first. */
  public List<String> executors() {
    return strings("executors");
  }

  /** The schema registry's gRPC address. */
  public String registryGrpc() {
    return description.get("registry_grpc").getAsString();
  }

  /** The schema registry's REST base URL, e.g. http://127.0.0.1:8081. */
  public String registryHttp() {
    return description.get("registry_http").getAsString();
  }

  /** The Kafka bootstrap servers. */
  public String kafka() {
    return description.get("kafka").getAsString();
  }

  /** The leader lease, in milliseconds. */
  public long leaseMs() {
    return description.get("lease_ms").getAsLong();
  }

  /** The pid of the process serving {@code address}. */
  public long pidOf(String address) {
    for (var element : description.getAsJsonArray("processes")) {
      JsonObject process = element.getAsJsonObject();
      if (process.get("address").getAsString().equals(address)) {
        return process.get("pid").getAsLong();
      }
    }
    throw new IllegalArgumentException("no testbed process serves " + address);
  }

  /** The testbed's home (data and logs under log/). */
  public Path home() {
    return home;
  }

  private List<String> strings(String key) {
    List<String> values = new ArrayList<>();
    description.getAsJsonArray(key).forEach(value -> values.add(value.getAsString()));
    return values;
  }

  /** Closes the testbed's stdin, which stops every service, and waits for it to exit. */
  @Override
  public void close() throws IOException, InterruptedException {
    process.getOutputStream().close();
    if (!process.waitFor(90, TimeUnit.SECONDS)) {
      process.destroy();
      process.waitFor(30, TimeUnit.SECONDS);
    }
  }
}
