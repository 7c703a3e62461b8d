package dev.lockgate.bench;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Contender (e) of bench/eos_throughput.py: a Kafka Streams topology copying one topic into
 * another with processing.guarantee=exactly_once_v2. Runs until SIGTERM; the bench times it
 * until a read_committed consumer sees every record in the output.
 *
 * <p>Arguments: bootstrap input output application-id threads commit-interval-ms state-dir
 */
public final class StreamsCopy {
  private StreamsCopy() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 7) {
      System.err.println(
          "usage: StreamsCopy BOOTSTRAP INPUT OUTPUT APPLICATION_ID THREADS COMMIT_MS STATE_DIR");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args[4]);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[5]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args[1], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .to(args[2], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          System.out.println("state " + now);
          if (now == KafkaStreams.State.ERROR) {
            stopped.countDown();
          }
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close();
                  stopped.countDown();
                }));
    streams.start();
    stopped.await();
  }
}
