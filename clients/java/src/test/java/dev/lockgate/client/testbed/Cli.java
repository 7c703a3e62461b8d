package dev.lockgate.client.testbed;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The Python CLI, {@code python -m lockgate.client.cli}: the other path through which the tests
 * check what the Java client did (it has its own client code, stubs and channel).
 */
public final class Cli {
  private final List<String> coordinators;

  /** The CLI aimed at every coordinator of the testbed. */
  public Cli(Testbed testbed) {
    this.coordinators = testbed.coordinators();
  }

  /** What one run printed and how it exited. */
  public record Result(int exitCode, String stdout, String stderr) {
    /** The stdout as JSON (for commands run with --json). */
    public JsonElement json() {
      if (exitCode != 0) {
        throw new AssertionError("the CLI exited " + exitCode + ": " + stderr + stdout);
      }
      return new Gson().fromJson(stdout, JsonElement.class);
    }
  }

  /** Runs {@code lockgate <args> --json --coordinator <all>} and returns its JSON. */
  public JsonElement json(String... args) {
    return run(true, args).json();
  }

  /** Runs {@code lockgate <args> [--json] --coordinator <all>}. */
  public Result run(boolean asJson, String... args) {
    List<String> command = new ArrayList<>(List.of(Testbed.python(), "-m", "lockgate.client.cli"));
    command.addAll(List.of(args));
    if (asJson) {
      command.add("--json");
    }
    command.add("--coordinator");
    command.add(String.join(",", coordinators));
    try {
      Path errors = Files.createTempFile("lockgate-cli-", ".stderr");
      Process process = new ProcessBuilder(command).redirectError(errors.toFile()).start();
      process.getOutputStream().close();
      byte[] out = process.getInputStream().readAllBytes();
      if (!process.waitFor(60, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new AssertionError("the CLI did not finish: " + command);
      }
      String err = Files.readString(errors);
      Files.delete(errors);
      return new Result(process.exitValue(), new String(out, StandardCharsets.UTF_8), err);
    } catch (IOException e) {
      throw new AssertionError("cannot run the CLI " + command + ": " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted running the CLI", e);
    }
  }
}
