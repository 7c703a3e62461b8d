package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockgate.v1.DataFormat;
import dev.lockgate.v1.DeliveryGuarantee;
import dev.lockgate.v1.ErrorTolerance;
import dev.lockgate.v1.OffsetPosition;
import dev.lockgate.v1.PipelineSpec;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/** Pipeline files read as the CLI reads them (no network). */
class PipelineFilesTest {
  @Test
  void readsTheRepositorysExample() {
    PipelineSpec spec = PipelineFiles.read(Path.of("../../examples/copy.yaml"));
    assertEquals("copy", spec.getName());
    assertEquals(
        OffsetPosition.OFFSET_POSITION_EARLIEST, spec.getSource().getKafka().getStartingOffsets());
    assertEquals("SELECT key, value, headers FROM input", spec.getTransform().getSql());
    assertEquals(DeliveryGuarantee.DELIVERY_GUARANTEE_EXACTLY_ONCE, spec.getDelivery());
    assertEquals(2000, spec.getCheckpoint().getIntervalMs());
    assertEquals(2, spec.getTasksMax());
    assertEquals(ErrorTolerance.ERROR_TOLERANCE_NONE, spec.getErrors().getTolerance());
  }

  @Test
  void expandsTheShorthandsOfJson() {
    PipelineSpec spec =
        PipelineFiles.parse(
            "{\"name\": \"j\", \"source\": {\"kafka\": {\"topics\": [\"a\"], \"format\":"
                + " \"json\"}}, \"delivery\": \"at-least-once\"}");
    assertEquals(
        DataFormat.DATA_FORMAT_JSON, spec.getSource().getKafka().getFormat().getValueFormat());
    assertEquals(DeliveryGuarantee.DELIVERY_GUARANTEE_AT_LEAST_ONCE, spec.getDelivery());
  }

  @Test
  void reportsEveryUnknownKeyAndEnumValueAtOnce() {
    PipelineFiles.PipelineFileException error =
        assertThrows(
            PipelineFiles.PipelineFileException.class,
            () ->
                PipelineFiles.parse(
                    "name: x\nsinks: {}\ndelivery: twice\nsource: {kafka: {topic: [a]}}\n"));
    String message = error.getMessage();
    assertTrue(message.contains("sinks: unknown field; PipelineSpec has: name, source"), message);
    assertTrue(
        message.contains("delivery: 'twice' is not one of: exactly_once, at_least_once"), message);
    assertTrue(message.contains("source.kafka.topic: unknown field"), message);
  }
}
