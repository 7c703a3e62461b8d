// An ExecutorService served by the test itself, so that a TypeScript "executor" can join the
// cluster (RegisterExecutor), take a task, and answer the leader's checkpoint calls while the
// test reports for it (ReportPrecommit, ReportCheckpointFailure, ReportTaskFailure).

import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  type CheckpointTask,
  ExecutorService,
  type LeaderEpoch,
  TaskIdSchema,
  type TriggerCheckpointRequest,
  type TriggerCheckpointResponse,
  TriggerCheckpointResponseSchema,
  TriggerOutcome,
} from "../../src/index.js";

/** One trigger the leader sent (a TriggerCheckpoint, or one item of a TriggerCheckpoints). */
export interface ReceivedTrigger {
  readonly pipelineName: string;
  readonly checkpointId: bigint;
  readonly leaderEpoch: LeaderEpoch | undefined;
  readonly tasks: readonly CheckpointTask[];
}

export class FakeExecutor {
  /** Every trigger received, in order; each was answered ACCEPTED. */
  readonly triggers: ReceivedTrigger[] = [];
  /** Every AbortCheckpoint received (acked). */
  readonly aborts: { pipelineName: string; checkpointId: bigint }[] = [];
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private server: http2.Http2Server | undefined;
  address = "";

  private constructor(private readonly executorId: string) {}

  /** Serve ExecutorService on a free loopback port (plaintext gRPC, as the leader calls). */
  static async start(executorId: string): Promise<FakeExecutor> {
    const fake = new FakeExecutor(executorId);
    const server = http2.createServer(
      connectNodeAdapter({
        routes: (router) => router.service(ExecutorService, fake.impl()),
        grpc: true,
        grpcWeb: false,
        connect: false,
      }),
    );
    server.on("session", (session) => {
      fake.sessions.add(session);
      session.once("close", () => fake.sessions.delete(session));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    fake.server = server;
    fake.address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    return fake;
  }

  private impl(): ServiceImpl<typeof ExecutorService> {
    return {
      triggerCheckpoint: (request) => this.accept(request, request.leaderEpoch),
      // The call carries the leader epoch; its triggers leave theirs unset.
      triggerCheckpoints: (request) => ({
        responses: request.triggers.map((trigger) => this.accept(trigger, request.leaderEpoch)),
      }),
      commitCheckpoint: (request) => ({ handlesCommitted: request.handles.length }),
      abortCheckpoint: (request) => {
        this.aborts.push({ pipelineName: request.pipelineName, checkpointId: request.checkpointId });
        return { handlesAborted: request.handles.length };
      },
      notifyAssignment: () => ({}),
      getExecutorStatus: () => ({ executorId: this.executorId }),
    };
  }

  /** Record a trigger and accept every task of it. */
  private accept(
    request: TriggerCheckpointRequest,
    leaderEpoch: LeaderEpoch | undefined,
  ): TriggerCheckpointResponse {
    this.triggers.push({
      pipelineName: request.pipelineName,
      checkpointId: request.checkpointId,
      leaderEpoch,
      tasks: request.tasks,
    });
    return create(TriggerCheckpointResponseSchema, {
      results: request.tasks.map((t) => ({
        taskId: t.taskId ?? create(TaskIdSchema),
        outcome: TriggerOutcome.ACCEPTED,
        currentTaskGeneration: t.taskGeneration,
      })),
    });
  }

  /** Stop serving and drop the leader's open connections. */
  async stop(): Promise<void> {
    for (const session of this.sessions) session.destroy();
    await new Promise<void>((resolve) => (this.server === undefined ? resolve() : this.server.close(() => resolve())));
  }
}
