// Leader following: a loop of leader-only calls keeps succeeding, each within its deadline,
// while the leader coordinator is SIGKILLed (as one of the calls starts).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type CoordinatorClient, TargetState, createCoordinatorClient } from "../../src/index.js";
import { lockgateJson } from "../support/python.js";
import { copySpec, uniqueName } from "../support/specs.js";
import type { Testbed } from "../support/testbed.js";

const CALL_DEADLINE_MS = 10_000;

export function leaderFollowingSuite(bed: () => Testbed): void {
  describe("leader following", () => {
    let coordinator: CoordinatorClient;
    before(() => {
      coordinator = createCoordinatorClient(bed().info.coordinators);
    });
    after(() => coordinator.close());

    test("Pause/Resume calls keep succeeding while the leader is SIGKILLed", async () => {
      const name = uniqueName("ts-lead");
      await coordinator.createPipeline({ spec: await copySpec(bed(), name, { partitions: 1, tasksMax: 1 }) });
      const before = await coordinator.getClusterInfo({});
      const oldLeader = before.leaderAddress;
      const oldEpoch = before.leaderEpoch?.epoch ?? 0n;
      assert.ok(bed().info.coordinators.includes(oldLeader), `leader ${oldLeader} is not a testbed replica`);
      let calls = 0;
      let callsAfterKill = 0;
      let slowestMs = 0;
      let lastTarget = TargetState.UNSPECIFIED;
      const loopDeadline = performance.now() + 60_000;
      while (callsAfterKill < 5 || coordinator.currentAddress() === oldLeader) {
        assert.ok(performance.now() < loopDeadline, "the loop did not get 5 calls through a new leader in 60 s");
        const pause = calls % 2 === 0;
        const started = performance.now();
        const call = pause
          ? coordinator.pausePipeline({ name }, { timeoutMs: CALL_DEADLINE_MS })
          : coordinator.resumePipeline({ name }, { timeoutMs: CALL_DEADLINE_MS });
        // SIGKILL as this call starts: it meets the leader dying (a reset under the call) or
        // dead (refused), then the election; both must stay invisible to the caller.
        if (calls === 3) process.kill(bed().pidOf(oldLeader), "SIGKILL");
        const response = await call; // any error fails the test
        slowestMs = Math.max(slowestMs, performance.now() - started);
        lastTarget = response.pipeline?.targetState ?? TargetState.UNSPECIFIED;
        assert.equal(lastTarget, pause ? TargetState.PAUSED : TargetState.RUNNING);
        if (calls >= 3) callsAfterKill += 1;
        calls += 1;
      }
      const now = await coordinator.getClusterInfo({});
      assert.notEqual(now.leaderAddress, oldLeader);
      assert.ok((now.leaderEpoch?.epoch ?? 0n) > oldEpoch, "a new leader epoch");
      assert.equal(coordinator.currentAddress(), now.leaderAddress, "the client follows the new leader");
      const viaCli = await lockgateJson<{ target_state: string }>(bed().info.coordinators, ["pipeline", "get", name]);
      assert.equal(viaCli.target_state, `TARGET_STATE_${TargetState[lastTarget]}`);
      console.log(`leader following: ${calls} calls, slowest ${Math.round(slowestMs)} ms (deadline ${CALL_DEADLINE_MS} ms)`);
      await coordinator.deletePipeline({ name });
    });
  });
}
