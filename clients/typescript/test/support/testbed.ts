// One `python -m lockgate.localcluster.testbed` for the test run: started in a `before`
// hook, its first stdout line read as JSON, stopped by closing its stdin in `after`.

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/** What the testbed prints: the addresses of every service and the pid of every process. */
export interface TestbedInfo {
  readonly home: string;
  readonly kafka: string;
  readonly coordinators: readonly string[];
  readonly executors: readonly string[];
  readonly registry_grpc: string;
  readonly registry_http: string;
  readonly lease_ms: number;
  readonly processes: readonly { readonly name: string; readonly address: string; readonly pid: number }[];
}

/** The Python the services run with: $LOCKGATE_PYTHON, else `python` (the venv's under make). */
export const PYTHON = process.env["LOCKGATE_PYTHON"] ?? "python";

export class Testbed {
  private constructor(
    readonly info: TestbedInfo,
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly home: string,
  ) {}

  /** Start the testbed and wait (at most `timeoutMs`) for its JSON line. */
  static async start(timeoutMs = 120_000): Promise<Testbed> {
    const home = mkdtempSync(join(tmpdir(), "lockgate-ts-"));
    const child = spawn(PYTHON, ["-m", "lockgate.localcluster.testbed", "--home", home], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000);
    });
    const line = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGTERM");
        reject(new Error(`the testbed printed nothing within ${timeoutMs} ms; stderr:\n${stderr}`));
      }, timeoutMs);
      createInterface({ input: child.stdout }).once("line", (text) => {
        clearTimeout(timer);
        resolve(text);
      });
      child.once("error", (err) => {
        clearTimeout(timer);
        reject(new Error(`cannot run ${PYTHON} -m lockgate.localcluster.testbed: ${err.message}`));
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the testbed exited (${code}) before it was ready; stderr:\n${stderr}`));
      });
    });
    return new Testbed(JSON.parse(line) as TestbedInfo, child, home);
  }

  /** The pid of the process serving `address`. */
  pidOf(address: string): number {
    const found = this.info.processes.find((p) => p.address === address);
    if (found === undefined) throw new Error(`no testbed process serves ${address}`);
    return found.pid;
  }

  /** Close the testbed's stdin (it stops every process) and wait for it to exit. */
  async stop(timeoutMs = 60_000): Promise<void> {
    if (this.child.exitCode === null) {
      const exited = new Promise<void>((resolve) => this.child.once("exit", () => resolve()));
      this.child.stdin.end();
      const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.home, { recursive: true, force: true });
  }
}
