// Pipeline specs and a leader-first client for the coordinator suites.

import { randomUUID } from "node:crypto";
import {
  type CoordinatorClient,
  type PipelineSpec,
  type MessageInitShape,
  PipelineSpecSchema,
  createCoordinatorClient,
} from "../../src/index.js";
import { createTopic } from "./python.js";
import type { Testbed } from "./testbed.js";

export type SpecInit = MessageInitShape<typeof PipelineSpecSchema>;

/** A unique lowercase name for a test's pipeline or topic. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** Create an input topic of `partitions` partitions and an output topic; a spec reading one
 * and writing the other. */
export async function copySpec(
  bed: Testbed,
  name: string,
  { partitions = 3, tasksMax = 3, intervalMs = 500n }: { partitions?: number; tasksMax?: number; intervalMs?: bigint } = {},
): Promise<SpecInit> {
  const input = `${name}-in`;
  const output = `${name}-out`;
  await createTopic(bed.info.kafka, input, partitions);
  await createTopic(bed.info.kafka, output, 1);
  return {
    name,
    source: { source: { case: "kafka", value: { bootstrapServers: bed.info.kafka, topics: [input] } } },
    sink: { sink: { case: "kafka", value: { bootstrapServers: bed.info.kafka, topic: output } } },
    checkpoint: { intervalMs, timeoutMs: 60_000n },
    tasksMax,
  };
}

/** The coordinators with the leader last, so a client's first call lands on a follower and
 * must follow its `lockgate-leader` redirect. */
export async function followersFirst(bed: Testbed): Promise<string[]> {
  const probe = createCoordinatorClient(bed.info.coordinators);
  try {
    const info = await probe.getClusterInfo({});
    return [...bed.info.coordinators].sort((a, b) => Number(a === info.leaderAddress) - Number(b === info.leaderAddress));
  } finally {
    probe.close();
  }
}

export type { CoordinatorClient, PipelineSpec };
