// The executor side of CoordinatorService from TypeScript: a test "executor" (FakeExecutor
// serving ExecutorService) joins with RegisterExecutor, keeps its session with Heartbeat, takes
// a task, reports for it (ReportPrecommit, ReportCheckpointFailure, ReportTaskFailure) and
// leaves with DeregisterExecutor; each effect is read back with the Python CLI.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import {
  CheckpointState,
  Code,
  type CoordinatorClient,
  LockgateError,
  type TaskAssignment,
  TaskState,
  TargetState,
  createCoordinatorClient,
} from "../../src/index.js";
import { FakeExecutor, type ReceivedTrigger } from "../support/fake-executor.js";
import { lockgateJson } from "../support/python.js";
import { copySpec, uniqueName } from "../support/specs.js";
import type { Testbed } from "../support/testbed.js";
import { waitFor } from "../support/wait.js";

interface CliExecutor {
  executor_id: string;
  address: string;
  executor_generation: string;
  state: string;
  last_heartbeat_time?: string;
}

export function executorMembershipSuite(bed: () => Testbed): void {
  describe("CoordinatorService, executor side", () => {
    const executorId = uniqueName("ts-exec");
    const name = uniqueName("ts-member");
    let coordinator: CoordinatorClient;
    let fake: FakeExecutor;
    let generation = 0n;
    let assignments: readonly TaskAssignment[] = [];
    const failedTasks = new Set<number>();
    let heartbeating = false;
    let heartbeatLoop: Promise<void> = Promise.resolve();
    const cli = <T>(...args: string[]): Promise<T> => lockgateJson<T>(bed().info.coordinators, args);
    const executorViaCli = async (): Promise<CliExecutor | undefined> =>
      (await cli<{ executors: CliExecutor[] }>("cluster", "status")).executors.find((e) => e.executor_id === executorId);

    /** One heartbeat: every assigned task reported RUNNING (PAUSED if so asked), except the
     * ones this test failed. */
    async function heartbeat(): Promise<void> {
      const response = await coordinator.heartbeat({
        executorId,
        executorGeneration: generation,
        taskStatuses: assignments.map((a) => ({
          taskId: a.taskId,
          taskGeneration: a.taskGeneration,
          state: failedTasks.has(a.taskId?.taskIndex ?? -1)
            ? TaskState.FAILED
            : a.targetState === TargetState.PAUSED
              ? TaskState.PAUSED
              : TaskState.RUNNING,
        })),
      });
      assignments = response.assignments;
    }

    before(async () => {
      coordinator = createCoordinatorClient(bed().info.coordinators);
      fake = await FakeExecutor.start(executorId);
    });
    after(async () => {
      heartbeating = false;
      await heartbeatLoop;
      coordinator.close();
      await fake.stop();
    });

    test("RegisterExecutor: the CLI lists the new executor ALIVE at its address", async () => {
      const registered = await coordinator.registerExecutor({
        executorId,
        address: fake.address,
        sparkMaster: "none",
        version: "ts-test",
      });
      generation = registered.executorGeneration;
      assert.ok(generation >= 1n);
      assert.ok(registered.heartbeatIntervalMs > 0n);
      const seen = await executorViaCli();
      assert.equal(seen?.state, "EXECUTOR_STATE_ALIVE");
      assert.equal(seen?.address, fake.address);
      assert.equal(seen?.executor_generation, String(generation));
      heartbeating = true;
      const interval = Number(registered.heartbeatIntervalMs);
      heartbeatLoop = (async () => {
        while (heartbeating) {
          await heartbeat().catch(() => undefined); // the next beat retries; the test asserts effects
          await delay(interval); // the heartbeat period the leader asked for
        }
      })();
    });

    test("Heartbeat: the executor gets a task of a new pipeline, which the CLI shows RUNNING on it", async () => {
      await coordinator.createPipeline({ spec: await copySpec(bed(), name, { intervalMs: 300n }) });
      const mine = await waitFor("a task assigned to the TypeScript executor", async () =>
        assignments.find((a) => a.taskId?.pipelineName === name),
      );
      await waitFor("the CLI to show the task RUNNING on the TypeScript executor", async () => {
        const status = await cli<{ tasks: { task_id: { task_index: number }; executor_id: string; state: string }[] }>(
          "pipeline",
          "status",
          name,
        );
        const task = status.tasks.find((t) => t.task_id.task_index === mine.taskId?.taskIndex);
        return task?.executor_id === executorId && task.state === "TASK_STATE_RUNNING" ? task : undefined;
      });
      const seen = await executorViaCli();
      assert.ok(seen?.last_heartbeat_time !== undefined);
    });

    /** The next TriggerCheckpoint of the pipeline after checkpoint `after`, with our task. */
    const nextTrigger = (afterId: bigint): Promise<ReceivedTrigger> =>
      waitFor(`a trigger of ${name} after checkpoint ${afterId}`, async () =>
        fake.triggers.find((t) => t.pipelineName === name && t.checkpointId > afterId && t.tasks.length > 0),
      );

    let precommitted = 0n;

    test("ReportPrecommit completes the checkpoint the leader triggered on the executor: the CLI shows it COMMITTED", async () => {
      const trigger = await nextTrigger(0n);
      const task = trigger.tasks[0]!;
      const response = await coordinator.reportPrecommit({
        leaderEpoch: trigger.leaderEpoch,
        checkpointId: trigger.checkpointId,
        taskId: task.taskId,
        taskGeneration: task.taskGeneration,
        executorId,
        executorGeneration: generation,
        sourceRanges: task.startOffsets.map((o) => ({
          topic: o.topic,
          partition: o.partition,
          startOffset: o.offset,
          endOffset: o.offset,
        })),
        counts: {},
      });
      assert.notEqual(response.checkpointState, CheckpointState.ABORTED);
      precommitted = trigger.checkpointId;
      const viaCli = await waitFor("the checkpoint COMMITTED", async () => {
        const checkpoint = await cli<{ state: string; tasks: { executor_id: string; state: string }[] }>(
          "pipeline",
          "checkpoints",
          name,
          "--id",
          String(trigger.checkpointId),
        );
        return checkpoint.state === "CHECKPOINT_STATE_COMMITTED" ? checkpoint : undefined;
      });
      const ours = viaCli.tasks.find((t) => t.executor_id === executorId);
      assert.equal(ours?.state, "TASK_CHECKPOINT_STATE_COMMITTED");
    });

    test("ReportCheckpointFailure aborts the next checkpoint with the reported error, as the CLI shows", async () => {
      const trigger = await nextTrigger(precommitted);
      const task = trigger.tasks[0]!;
      const message = `the TypeScript executor could not pre-commit ${trigger.checkpointId}`;
      const response = await coordinator.reportCheckpointFailure({
        leaderEpoch: trigger.leaderEpoch,
        checkpointId: trigger.checkpointId,
        taskId: task.taskId,
        taskGeneration: task.taskGeneration,
        executorId,
        executorGeneration: generation,
        error: { message, errorType: "TsTestError" },
        taskFailed: false,
      });
      assert.equal(response.checkpointState, CheckpointState.ABORTED);
      const viaCli = await cli<{ state: string }>("pipeline", "checkpoints", name, "--id", String(trigger.checkpointId));
      assert.equal(viaCli.state, "CHECKPOINT_STATE_ABORTED");
      assert.ok(JSON.stringify(viaCli).includes(message), JSON.stringify(viaCli));
    });

    test("ReportTaskFailure marks the task FAILED with the reported error, as the CLI shows", async () => {
      const mine = assignments.find((a) => a.taskId?.pipelineName === name);
      assert.ok(mine?.taskId !== undefined);
      const message = "the TypeScript executor failed its task on purpose";
      failedTasks.add(mine.taskId.taskIndex);
      await coordinator.reportTaskFailure({
        taskId: mine.taskId,
        taskGeneration: mine.taskGeneration,
        executorId,
        executorGeneration: generation,
        error: { message, errorType: "TsTestError" },
      });
      const status = await cli<{
        tasks: { task_id: { task_index: number }; state: string; last_error?: { message: string } }[];
      }>("pipeline", "status", name);
      const task = status.tasks.find((t) => t.task_id.task_index === mine.taskId?.taskIndex);
      assert.equal(task?.state, "TASK_STATE_FAILED");
      assert.equal(task?.last_error?.message, message);
    });

    test("DeregisterExecutor: the CLI no longer lists the executor ALIVE; a stale heartbeat is refused", async () => {
      heartbeating = false;
      await heartbeatLoop;
      await coordinator.deregisterExecutor({ executorId, executorGeneration: generation });
      const seen = await executorViaCli();
      assert.notEqual(seen?.state, "EXECUTOR_STATE_ALIVE");
      const refused = await coordinator.heartbeat({ executorId, executorGeneration: generation }).catch((e: unknown) => e);
      assert.ok(refused instanceof LockgateError, `heartbeat after leaving: ${String(refused)}`);
      assert.equal(refused.code, Code.NotFound, "a session that left must register again");
      await coordinator.deletePipeline({ name });
    });
  });
}
