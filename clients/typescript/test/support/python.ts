// The other path a test checks an effect through: the Python `lockgate` CLI, and the
// project's Kafka admin helper for topics.

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { PYTHON } from "./testbed.js";

const run = promisify(execFile);

/** Run `lockgate ARGS... --coordinator ADDRESSES` and return stdout (throws on a failure). */
export async function lockgateCli(coordinators: readonly string[], args: readonly string[]): Promise<string> {
  const { stdout } = await run(PYTHON, ["-m", "lockgate.client.cli", ...args, "--coordinator", coordinators.join(",")], {
    timeout: 60_000,
  });
  return stdout;
}

/** `lockgate ... --json` parsed. */
export async function lockgateJson<T = Record<string, unknown>>(
  coordinators: readonly string[],
  args: readonly string[],
): Promise<T> {
  return JSON.parse(await lockgateCli(coordinators, [...args, "--json"])) as T;
}

/** Create a Kafka topic (lockgate.localcluster.kafka.create_topic). */
export async function createTopic(bootstrap: string, name: string, partitions: number): Promise<void> {
  await run(
    PYTHON,
    [
      "-c",
      "import sys; from lockgate.localcluster.kafka import create_topic; " +
        "create_topic(sys.argv[1], sys.argv[2], partitions=int(sys.argv[3]))",
      bootstrap,
      name,
      String(partitions),
    ],
    { timeout: 60_000 },
  );
}
