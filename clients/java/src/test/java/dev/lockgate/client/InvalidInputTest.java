package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.rpc.BadRequest;
import dev.lockgate.client.testbed.Cli;
import dev.lockgate.client.testbed.RegistryRest;
import dev.lockgate.client.testbed.Specs;
import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.CheckpointSpec;
import dev.lockgate.v1.CreatePipelineRequest;
import dev.lockgate.v1.FieldViolation;
import dev.lockgate.v1.PipelineSpec;
import dev.lockgate.v1.RegisterSchemaRequest;
import dev.lockgate.v1.ValidatePipelineRequest;
import io.grpc.Status;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** Bad input surfaces as a LockgateException with INVALID_ARGUMENT and the bad fields' paths. */
@ExtendWith(TestbedExtension.class)
class InvalidInputTest {
  private static Testbed testbed;
  private static LockgateClient lockgate;

  @BeforeAll
  static void connect(Testbed shared) {
    testbed = shared;
    lockgate =
        LockgateClient.builder()
            .coordinators(shared.coordinators())
            .schemaRegistry(shared.registryGrpc())
            .build();
  }

  @AfterAll
  static void close() {
    lockgate.close();
  }

  @Test
  void aBadSpecNamesEveryBadField() {
    String name = Specs.uniqueName("java-bad");
    PipelineSpec bad =
        Specs.copy(testbed, name).toBuilder()
            .clearSink()
            .setTasksMax(-1)
            .setCheckpoint(CheckpointSpec.newBuilder().setIntervalMs(-5))
            .build();

    LockgateException refused =
        assertThrows(
            LockgateException.class,
            () ->
                lockgate
                    .coordinator()
                    .createPipeline(CreatePipelineRequest.newBuilder().setSpec(bad).build()));
    assertEquals(Status.Code.INVALID_ARGUMENT, refused.getStatus().getCode());
    assertTrue(
        refused.fieldPaths().containsAll(List.of("sink", "tasks_max", "checkpoint.interval_ms")),
        () -> "field paths: " + refused.fieldPaths());
    assertFalse(refused.fieldViolations().stream().anyMatch(v -> v.getDescription().isEmpty()));

    // ValidatePipeline lists the same violations without an error.
    List<FieldViolation> listed =
        lockgate
            .coordinator()
            .validatePipeline(ValidatePipelineRequest.newBuilder().setSpec(bad).build())
            .getViolationsList();
    assertEquals(
        Set.copyOf(refused.fieldPaths()),
        Set.copyOf(listed.stream().map(FieldViolation::getField).toList()));

    Cli.Result lookup = new Cli(testbed).run(true, "pipeline", "get", name);
    assertNotEquals(0, lookup.exitCode(), "nothing was created: " + lookup.stdout());
  }

  @Test
  void aBadSchemaNamesTheSchemaField() {
    String subject = Specs.uniqueName("java-bad") + "-value";
    LockgateException refused =
        assertThrows(
            LockgateException.class,
            () ->
                lockgate
                    .schemaRegistry()
                    .registerSchema(
                        RegisterSchemaRequest.newBuilder()
                            .setSubject(subject)
                            .setSchema("{\"type\": \"recrod\", \"name\": \"Typo\"}")
                            .build()));
    assertEquals(Status.Code.INVALID_ARGUMENT, refused.getStatus().getCode());
    assertEquals(List.of("schema"), refused.fieldPaths());
    assertTrue(
        refused.fieldViolations().stream()
            .map(BadRequest.FieldViolation::getDescription)
            .anyMatch(d -> d.contains("recrod")),
        () -> "violations: " + refused.fieldViolations());
    assertEquals(
        404,
        new RegistryRest(testbed).call("GET", "/subjects/" + subject + "/versions", null).status());
  }
}
