// Integration tests against real processes: one `python -m lockgate.localcluster.testbed`
// (a Kafka broker, the schema registry, three coordinators, two control-only executors) for
// the whole file; each suite checks every effect through another path (the Python CLI, the
// registry's Confluent REST API, another replica). Suites run in this order: the executor
// fencing suite needs the leader change the leader-following suite causes.

import { after, before } from "node:test";
import { coordinatorSuite } from "./integration/coordinator.js";
import { executorSuite } from "./integration/executor.js";
import { executorMembershipSuite } from "./integration/executor-membership.js";
import { leaderFollowingSuite } from "./integration/leader-following.js";
import { schemaRegistrySuite } from "./integration/schema-registry.js";
import { Testbed } from "./support/testbed.js";

let testbed: Testbed | undefined;
const bed = (): Testbed => {
  if (testbed === undefined) throw new Error("the testbed did not start (see the before hook's error)");
  return testbed;
};

before(async () => {
  const started = performance.now();
  testbed = await Testbed.start();
  console.log(`testbed up in ${Math.round(performance.now() - started)} ms`);
});

after(async () => {
  const started = performance.now();
  await testbed?.stop();
  console.log(`testbed stopped in ${Math.round(performance.now() - started)} ms`);
});

schemaRegistrySuite(bed);
coordinatorSuite(bed);
executorMembershipSuite(bed);
leaderFollowingSuite(bed);
executorSuite(bed);
