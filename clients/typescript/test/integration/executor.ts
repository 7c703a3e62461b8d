// ExecutorService from TypeScript: GetExecutorStatus checked against GetClusterInfo and the
// testbed; the control RPCs (TriggerCheckpoint(s), Commit/AbortCheckpoint, NotifyAssignment)
// from a client holding an old leader epoch are refused with FAILED_PRECONDITION and a
// FencingFailure detail. Runs after the leader-following suite, which moved the cluster to a
// new epoch.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Code,
  type CoordinatorClient,
  type Executor,
  type ExecutorClient,
  FencingToken,
  LockgateError,
  createCoordinatorClient,
  createExecutorClient,
} from "../../src/index.js";
import type { Testbed } from "../support/testbed.js";
import { waitFor } from "../support/wait.js";

export function executorSuite(bed: () => Testbed): void {
  describe("ExecutorService", () => {
    let coordinator: CoordinatorClient;
    let executor: ExecutorClient;
    let registration: Executor;
    let epoch = 0n;

    before(async () => {
      coordinator = createCoordinatorClient(bed().info.coordinators);
      const address = bed().info.executors[0]!;
      executor = createExecutorClient(address);
      const info = await coordinator.getClusterInfo({});
      epoch = info.leaderEpoch?.epoch ?? 0n;
      const found = info.executors.find((e) => e.address === address);
      assert.ok(found !== undefined, `GetClusterInfo does not list the executor at ${address}`);
      registration = found;
    });
    after(() => {
      coordinator.close();
      executor.close();
    });

    test("GetExecutorStatus: the identity GetClusterInfo lists, the testbed's coordinators, the current epoch", async () => {
      assert.ok(epoch > 1n, "needs a second leader epoch (the leader-following suite kills the first leader)");
      const status = await waitFor("the executor to see the current epoch", async () => {
        const s = await executor.getExecutorStatus({});
        return (s.highestLeaderEpochSeen?.epoch ?? 0n) >= epoch ? s : undefined;
      });
      assert.equal(status.executorId, registration.executorId);
      assert.equal(status.executorGeneration, registration.executorGeneration);
      assert.deepEqual([...status.coordinatorAddresses].sort(), [...bed().info.coordinators].sort());
    });

    const stale = (): { leaderEpoch: { epoch: bigint; leaderId: string }; executorId: string; executorGeneration: bigint } => ({
      leaderEpoch: { epoch: 1n, leaderId: "c1" },
      executorId: registration.executorId,
      executorGeneration: registration.executorGeneration,
    });
    const task = { taskId: { pipelineName: "ts-none", taskIndex: 0 }, taskGeneration: 1n };
    const calls: Record<string, () => Promise<unknown>> = {
      TriggerCheckpoint: () =>
        executor.triggerCheckpoint({ ...stale(), pipelineName: "ts-none", checkpointId: 1n, tasks: [task], timeoutMs: 1000n }),
      TriggerCheckpoints: () =>
        executor.triggerCheckpoints({
          ...stale(),
          triggers: [
            {
              pipelineName: "ts-none",
              checkpointId: 1n,
              configVersion: 1n,
              tasks: [{ ...task, transactionalIdPrefix: "ts-none" }],
              timeoutMs: 1000n,
            },
          ],
        }),
      CommitCheckpoint: () => executor.commitCheckpoint({ ...stale(), pipelineName: "ts-none", checkpointId: 1n }),
      AbortCheckpoint: () =>
        executor.abortCheckpoint({ ...stale(), pipelineName: "ts-none", checkpointId: 1n, reason: "ts test" }),
      NotifyAssignment: () => executor.notifyAssignment(stale()),
    };
    for (const [rpc, call] of Object.entries(calls)) {
      test(`${rpc} with an old leader epoch is refused with a FencingFailure`, async () => {
        await assert.rejects(call(), (err: unknown) => {
          assert.ok(err instanceof LockgateError, String(err));
          assert.equal(err.code, Code.FailedPrecondition);
          assert.equal(err.fencingFailure?.token, FencingToken.LEADER_EPOCH);
          assert.equal(err.fencingFailure?.presented, 1n);
          assert.ok((err.fencingFailure?.current ?? 0n) >= epoch);
          return true;
        });
        const after = await executor.getExecutorStatus({});
        assert.ok((after.highestLeaderEpochSeen?.epoch ?? 0n) >= epoch, "the refused call did not lower the epoch");
      });
    }
  });
}
