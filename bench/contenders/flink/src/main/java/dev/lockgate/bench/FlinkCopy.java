package dev.lockgate.bench;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Contender (f) of bench/eos_throughput.py: a Flink DataStream job in a local MiniCluster,
 * KafkaSource (bounded at the input's end offsets) -> KafkaSink at
 * DeliveryGuarantee.EXACTLY_ONCE, checkpointing at Lockgate's interval. The job ends once its
 * final checkpoint has committed the last transactions.
 *
 * <p>Arguments: bootstrap input output parallelism checkpoint-interval-ms transactional-id-prefix
 */
public final class FlinkCopy {
  private FlinkCopy() {}

  /** Key and value bytes of a record, as they were read. */
  static final class KeyValue implements KafkaRecordDeserializationSchema<Tuple2<byte[], byte[]>> {
    @Override
    public void deserialize(
        ConsumerRecord<byte[], byte[]> record, Collector<Tuple2<byte[], byte[]>> out) {
      out.collect(Tuple2.of(record.key(), record.value()));
    }

    @Override
    public TypeInformation<Tuple2<byte[], byte[]>> getProducedType() {
      return Types.TUPLE(Types.PRIMITIVE_ARRAY(Types.BYTE), Types.PRIMITIVE_ARRAY(Types.BYTE));
    }
  }

  /** The record written to the output topic, partitioned by key as a plain producer would. */
  static final class ToTopic implements KafkaRecordSerializationSchema<Tuple2<byte[], byte[]>> {
    private final String topic;

    ToTopic(String topic) {
      this.topic = topic;
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(
        Tuple2<byte[], byte[]> element, KafkaSinkContext context, Long timestamp) {
      return new ProducerRecord<>(topic, element.f0, element.f1);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println(
          "usage: FlinkCopy BOOTSTRAP INPUT OUTPUT PARALLELISM CHECKPOINT_MS TRANSACTIONAL_ID_PREFIX");
      System.exit(2);
    }
    int parallelism = Integer.parseInt(args[3]);
    StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism);
    env.enableCheckpointing(Long.parseLong(args[4])); // exactly-once checkpoints by default

    KafkaSource<Tuple2<byte[], byte[]>> source =
        KafkaSource.<Tuple2<byte[], byte[]>>builder()
            .setBootstrapServers(args[0])
            .setTopics(args[1])
            .setGroupId(args[5] + "-source")
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setBounded(OffsetsInitializer.latest())
            .setDeserializer(new KeyValue())
            .build();
    KafkaSink<Tuple2<byte[], byte[]>> sink =
        KafkaSink.<Tuple2<byte[], byte[]>>builder()
            .setBootstrapServers(args[0])
            .setRecordSerializer(new ToTopic(args[2]))
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(args[5])
            // The sink's default (1 h) is above the broker's transaction.max.timeout.ms (15 min).
            .setProperty("transaction.timeout.ms", "600000")
            .build();
    env.fromSource(source, WatermarkStrategy.noWatermarks(), "input").sinkTo(sink);
    long began = System.nanoTime();
    env.execute("lockgate-bench-flink-copy");
    System.out.printf("job finished in %.1f s%n", (System.nanoTime() - began) / 1e9);
  }
}
