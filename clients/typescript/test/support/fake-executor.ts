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
  TriggerOutcome,
} from "../../src/index.js";

/** One TriggerCheckpoint the leader sent. */
export interface ReceivedTrigger {
  readonly pipelineName: string;
  readonly checkpointId: bigint;
  readonly leaderEpoch: LeaderEpoch | undefined;
  readonly tasks: readonly CheckpointTask[];
}

export class FakeExecutor {
  /** Every TriggerCheckpoint received, in order; each was answered ACCEPTED. */
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
      triggerCheckpoint: (request) => {
        this.triggers.push({
          pipelineName: request.pipelineName,
          checkpointId: request.checkpointId,
          leaderEpoch: request.leaderEpoch,
          tasks: request.tasks,
        });
        return {
          results: request.tasks.map((t) => ({
            taskId: t.taskId ?? create(TaskIdSchema),
            outcome: TriggerOutcome.ACCEPTED,
            currentTaskGeneration: t.taskGeneration,
          })),
        };
      },
      commitCheckpoint: (request) => ({ handlesCommitted: request.handles.length }),
      abortCheckpoint: (request) => {
        this.aborts.push({ pipelineName: request.pipelineName, checkpointId: request.checkpointId });
        return { handlesAborted: request.handles.length };
      },
      notifyAssignment: () => ({}),
      getExecutorStatus: () => ({ executorId: this.executorId }),
    };
  }

  /** Stop serving and drop the leader's open connections. */
  async stop(): Promise<void> {
    for (const session of this.sessions) session.destroy();
    await new Promise<void>((resolve) => (this.server === undefined ? resolve() : this.server.close(() => resolve())));
  }
}
