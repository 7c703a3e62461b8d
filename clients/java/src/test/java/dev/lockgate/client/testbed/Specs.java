package dev.lockgate.client.testbed;

import dev.lockgate.v1.CheckpointSpec;
import dev.lockgate.v1.KafkaSinkSpec;
import dev.lockgate.v1.KafkaSourceSpec;
import dev.lockgate.v1.PipelineSpec;
import dev.lockgate.v1.SinkSpec;
import dev.lockgate.v1.SourceSpec;
import java.util.UUID;

/** Pipeline specs for the tests, each on its own new topics. */
public final class Specs {
  private Specs() {}

  /** A unique pipeline (and topic) name starting with {@code prefix}. */
  public static String uniqueName(String prefix) {
    return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  /**
   * A copy pipeline named {@code name} from a new topic {@code <name>-in} to a new topic {@code
   * <name>-out} (both created here, 2 partitions), two tasks, a checkpoint every 200 ms.
   */
  public static PipelineSpec copy(Testbed testbed, String name) {
    String input = name + "-in";
    String output = name + "-out";
    Topics.create(testbed, 2, input, output);
    return PipelineSpec.newBuilder()
        .setName(name)
        .setSource(
            SourceSpec.newBuilder()
                .setKafka(
                    KafkaSourceSpec.newBuilder()
                        .setBootstrapServers(testbed.kafka())
                        .addTopics(input)))
        .setSink(
            SinkSpec.newBuilder()
                .setKafka(
                    KafkaSinkSpec.newBuilder()
                        .setBootstrapServers(testbed.kafka())
                        .setTopic(output)))
        .setCheckpoint(CheckpointSpec.newBuilder().setIntervalMs(200))
        .setTasksMax(2)
        .build();
  }
}
