package dev.lockgate.client.testbed;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;

/** Kafka topics for the tests' pipelines (the broker does not create topics on demand). */
public final class Topics {
  private Topics() {}

  /** Creates each topic with {@code partitions} partitions on the testbed's broker. */
  public static void create(Testbed testbed, int partitions, String... names) {
    try (Admin admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, testbed.kafka()))) {
      admin
          .createTopics(
              List.of(names).stream()
                  .map(name -> new NewTopic(name, partitions, (short) 1))
                  .toList())
          .all()
          .get(30, TimeUnit.SECONDS);
    } catch (Exception e) {
      throw new AssertionError("cannot create topics " + List.of(names) + ": " + e, e);
    }
  }
}
