package dev.lockgate.client.examples;

import dev.lockgate.client.LockgateClient;
import dev.lockgate.client.LockgateException;
import dev.lockgate.client.PipelineFiles;
import dev.lockgate.v1.CheckCompatibilityRequest;
import dev.lockgate.v1.CheckCompatibilityResponse;
import dev.lockgate.v1.Checkpoint;
import dev.lockgate.v1.CreatePipelineRequest;
import dev.lockgate.v1.FieldViolation;
import dev.lockgate.v1.GetPipelineStatusRequest;
import dev.lockgate.v1.GetPipelineStatusResponse;
import dev.lockgate.v1.ListCheckpointsRequest;
import dev.lockgate.v1.PipelineSpec;
import dev.lockgate.v1.RegisterSchemaRequest;
import dev.lockgate.v1.RegisterSchemaResponse;
import dev.lockgate.v1.Task;
import dev.lockgate.v1.ValidatePipelineRequest;
import dev.lockgate.v1.ValidatePipelineResponse;
import io.grpc.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.stream.Collectors;

/**
 * The Java client end to end: create a pipeline from a file, watch its status, list its
 * checkpoints; register an Avro schema and check a candidate's compatibility.
 *
 * <pre>
 * mvn -q compile exec:java -Dexec.args="--coordinators 127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072 \
 *   --registry 127.0.0.1:7090 --file ../../examples/copy.yaml \
 *   --schema ../../examples/schema_registry/user_v1.avsc \
 *   --candidate ../../examples/schema_registry/user_v2.avsc --watch-seconds 10"
 * </pre>
 *
 * <p>Exit status: 0 done, 2 the pipeline file or spec is invalid (every violation printed), 1
 * another error.
 */
public final class PipelineExample {
  private PipelineExample() {}

  /** The command line: flags of the form {@code --name value}. */
  record Options(
      String coordinators,
      String registry,
      Path file,
      Path schema,
      Path candidate,
      Duration watch) {
    static Options parse(String[] args) {
      java.util.Map<String, String> flags = new java.util.HashMap<>();
      for (int i = 0; i + 1 < args.length; i += 2) {
        if (!args[i].startsWith("--")) {
          throw new IllegalArgumentException("expected --flag value, got " + args[i]);
        }
        flags.put(args[i].substring(2), args[i + 1]);
      }
      if (args.length % 2 != 0) {
        throw new IllegalArgumentException("flag " + args[args.length - 1] + " has no value");
      }
      return new Options(
          flags.getOrDefault("coordinators", "127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072"),
          flags.getOrDefault("registry", "127.0.0.1:7090"),
          Path.of(flags.getOrDefault("file", "../../examples/copy.yaml")),
          Path.of(flags.getOrDefault("schema", "../../examples/schema_registry/user_v1.avsc")),
          Path.of(flags.getOrDefault("candidate", "../../examples/schema_registry/user_v2.avsc")),
          Duration.ofSeconds(Long.parseLong(flags.getOrDefault("watch-seconds", "10"))));
    }
  }

  /** Runs the example; see the class comment for the flags. */
  public static void main(String[] args) throws IOException, InterruptedException {
    Options options = Options.parse(args);
    PipelineSpec spec;
    try {
      spec = PipelineFiles.read(options.file());
    } catch (PipelineFiles.PipelineFileException e) {
      System.err.println("error: " + e.getMessage());
      System.exit(2);
      return;
    }
    try (LockgateClient lockgate =
        LockgateClient.builder()
            .coordinators(options.coordinators())
            .schemaRegistry(options.registry())
            .build()) {
      createAndWatch(lockgate, spec, options.watch());
      registerAndCheck(lockgate, spec, options.schema(), options.candidate());
    } catch (LockgateException e) {
      System.err.println(
          "error: " + e.getStatus().getCode() + ": " + e.getStatus().getDescription());
      e.fieldViolations()
          .forEach(v -> System.err.println("  " + v.getField() + ": " + v.getDescription()));
      e.fencingFailure().ifPresent(f -> System.err.println("  fenced: " + f));
      System.exit(e.getStatus().getCode() == Status.Code.INVALID_ARGUMENT ? 2 : 1);
    }
  }

  private static void createAndWatch(LockgateClient lockgate, PipelineSpec spec, Duration watch)
      throws InterruptedException {
    var coordinator = lockgate.coordinator();
    ValidatePipelineResponse check =
        coordinator.validatePipeline(ValidatePipelineRequest.newBuilder().setSpec(spec).build());
    if (!check.getValid()) {
      System.err.println("error: pipeline " + spec.getName() + " is not valid:");
      for (FieldViolation violation : check.getViolationsList()) {
        System.err.println("  " + violation.getField() + ": " + violation.getDescription());
      }
      System.exit(2);
    }
    if (check.getNameTaken()) {
      System.out.println("pipeline " + spec.getName() + " exists already; watching it");
    } else {
      var created =
          coordinator
              .createPipeline(CreatePipelineRequest.newBuilder().setSpec(spec).build())
              .getPipeline();
      System.out.printf(
          "created pipeline %s (config version %d) through %s%n",
          created.getName(), created.getConfigVersion(), coordinator.currentAddress());
    }

    Instant end = Instant.now().plus(watch);
    while (true) {
      GetPipelineStatusResponse status =
          coordinator.getPipelineStatus(
              GetPipelineStatusRequest.newBuilder().setName(spec.getName()).build());
      String tasks =
          status.getTasksList().stream()
              .map(PipelineExample::describe)
              .collect(Collectors.joining(", "));
      System.out.printf(
          "%s  %s  target %s  tasks [%s]  last committed checkpoint %d%n",
          Instant.now(),
          status.getName(),
          status.getTargetState().name().replace("TARGET_STATE_", ""),
          tasks,
          status.getLastCommittedCheckpointId());
      if (!Instant.now().plusSeconds(1).isBefore(end)) {
        break;
      }
      Thread.sleep(1000); // the refresh interval of the watch
    }

    System.out.println("latest checkpoints of " + spec.getName() + ":");
    for (Checkpoint checkpoint :
        coordinator
            .listCheckpoints(
                ListCheckpointsRequest.newBuilder()
                    .setPipelineName(spec.getName())
                    .setPageSize(5)
                    .build())
            .getCheckpointsList()) {
      System.out.printf(
          "  #%d %s  %d ms  %d records read%n",
          checkpoint.getCheckpointId(),
          checkpoint.getState().name().replace("CHECKPOINT_STATE_", ""),
          checkpoint.getTotalDurationMs(),
          checkpoint.getCounts().getRecordsRead());
    }
  }

  private static String describe(Task task) {
    return task.getTaskId().getTaskIndex()
        + ":"
        + task.getState().name().replace("TASK_STATE_", "")
        + (task.getExecutorId().isEmpty() ? "" : "@" + task.getExecutorId());
  }

  private static void registerAndCheck(
      LockgateClient lockgate, PipelineSpec spec, Path schema, Path candidate) throws IOException {
    var registry = lockgate.schemaRegistry();
    String subject = spec.getSink().getKafka().getTopic() + "-value";
    RegisterSchemaResponse registered =
        registry.registerSchema(
            RegisterSchemaRequest.newBuilder()
                .setSubject(subject)
                .setSchema(Files.readString(schema))
                .build());
    System.out.printf(
        "schema %s registered under %s: id %d, version %d%s%n",
        schema.getFileName(),
        subject,
        registered.getSchemaId(),
        registered.getVersion(),
        registered.getCreated() ? "" : " (already there)");
    CheckCompatibilityResponse compatibility =
        registry.checkCompatibility(
            CheckCompatibilityRequest.newBuilder()
                .setSubject(subject)
                .setSchema(Files.readString(candidate))
                .build());
    System.out.printf(
        "candidate %s is %s under %s%n",
        candidate.getFileName(),
        compatibility.getCompatible() ? "compatible" : "NOT compatible",
        compatibility.getLevel().name().replace("COMPATIBILITY_LEVEL_", ""));
    compatibility.getReasonsList().forEach(reason -> System.out.println("  " + reason));
  }
}
