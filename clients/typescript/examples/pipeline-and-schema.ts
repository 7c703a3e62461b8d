// Example: create a pipeline from a pipeline file, watch its status, list its checkpoints;
// register an Avro schema and check the compatibility of its next versions.
//
//   npm run build   # or ./build.sh test, which compiles too
//   node dist/examples/pipeline-and-schema.js \
//     --coordinators 127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072 --registry 127.0.0.1:7090 \
//     --file ../../examples/copy.yaml --schemas ../../examples/schema_registry --watch-seconds 10
//
// The pipeline file is the `lockgate pipeline create -f` format (defined by
// clients/python/lockgate/client/pipeline_file.py): the PipelineSpec message in YAML or JSON
// with proto field names, enum values written short and lower-case (`delivery: exactly_once`),
// and `format: json` standing for `format: {value_format: json}`.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { setTimeout as delay } from "node:timers/promises";
import type { DescEnum, DescMessage } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";
import { parse as parseYaml } from "yaml";
import {
  CheckpointState,
  Code,
  LockgateError,
  type PipelineSpec,
  PipelineSpecSchema,
  TaskState,
  createCoordinatorClient,
  createSchemaRegistryClient,
  fromJson,
} from "../src/index.js";

/** An enum value written short ("exactly_once") as its proto name ("DELIVERY_GUARANTEE_EXACTLY_ONCE"). */
function enumName(descriptor: DescEnum, value: unknown, path: string): unknown {
  if (typeof value !== "string") return value;
  const wanted = value.trim().toUpperCase().replaceAll("-", "_");
  const found = descriptor.values.find((v) => v.name === wanted || v.name.endsWith(`_${wanted}`));
  if (found === undefined) {
    const choices = descriptor.values.filter((v) => !v.name.endsWith("_UNSPECIFIED")).map((v) => v.localName.toLowerCase());
    throw new Error(`${path}: ${JSON.stringify(value)} is not one of: ${choices.join(", ")}`);
  }
  return found.name;
}

/** The file's shorthands expanded into the proto JSON mapping of `descriptor`. */
function normalize(descriptor: DescMessage, raw: unknown, path: string): unknown {
  if (descriptor.typeName === "lockgate.v1.FormatSpec" && typeof raw === "string") raw = { value_format: raw };
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) return raw;
  const result: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw)) {
    const where = path === "" ? key : `${path}.${key}`;
    const field = descriptor.fields.find((f) => f.name === key);
    if (field === undefined) {
      throw new Error(`${where}: unknown field; ${descriptor.name} has: ${descriptor.fields.map((f) => f.name).join(", ")}`);
    }
    const each = (v: unknown): unknown =>
      field.enum !== undefined ? enumName(field.enum, v, where) : field.message !== undefined ? normalize(field.message, v, where) : v;
    result[key] = Array.isArray(value) ? value.map(each) : each(value);
  }
  return result;
}

/** Read a pipeline file (YAML or JSON) as a PipelineSpec. */
function readPipelineFile(path: string): PipelineSpec {
  const raw: unknown = parseYaml(readFileSync(path, "utf8"));
  try {
    return fromJson(PipelineSpecSchema, normalize(PipelineSpecSchema, raw, "") as JsonValue);
  } catch (err) {
    throw new Error(`${path}: ${(err as Error).message}`);
  }
}

/** Create, watch, list checkpoints; false if the spec was refused (the violations printed). */
async function pipelineDemo(coordinators: string, file: string, watchSeconds: number): Promise<boolean> {
  const coordinator = createCoordinatorClient(coordinators);
  try {
    const spec = readPipelineFile(file);
    try {
      const { pipeline } = await coordinator.createPipeline({ spec });
      console.log(`created pipeline ${pipeline?.name} (config version ${pipeline?.configVersion})`);
    } catch (err) {
      if (!(err instanceof LockgateError)) throw err;
      if (err.code === Code.InvalidArgument) {
        console.error(`${file}: the coordinator refused the spec (${err.codeName}):`);
        for (const v of err.fieldViolations) console.error(`  ${v.field}: ${v.description}`);
        return false;
      }
      if (err.code !== Code.AlreadyExists) throw err;
      console.log(`pipeline ${spec.name} exists already; watching it`);
    }
    const until = performance.now() + watchSeconds * 1000;
    do {
      const status = await coordinator.getPipelineStatus({ name: spec.name });
      const tasks = status.tasks.map((t) => `${t.taskId?.taskIndex}:${TaskState[t.state]}@${t.executorId || "-"}`);
      console.log(
        `status: tasks ${tasks.join(" ")}; last committed checkpoint ${status.lastCommittedCheckpointId}; ` +
          `in flight [${status.inFlightCheckpointIds.join(", ")}]`,
      );
      await delay(1000); // refresh period of the status view
    } while (performance.now() < until);
    const { checkpoints } = await coordinator.listCheckpoints({ pipelineName: spec.name, pageSize: 5 });
    console.log("newest checkpoints:");
    for (const c of checkpoints) {
      console.log(`  #${c.checkpointId} ${CheckpointState[c.state]} total ${c.totalDurationMs} ms ${c.abortReason}`);
    }
    return true;
  } finally {
    coordinator.close();
  }
}

async function schemaDemo(registry: string, schemas: string, subject: string): Promise<void> {
  const client = createSchemaRegistryClient(registry);
  const schema = (name: string): string => readFileSync(join(schemas, name), "utf8");
  try {
    const v1 = await client.registerSchema({ subject, schema: schema("user_v1.avsc") });
    console.log(`registered ${subject} version ${v1.version} (schema id ${v1.schemaId}, new: ${v1.created})`);
    for (const candidate of ["user_v2.avsc", "user_v3_incompatible.avsc"]) {
      const check = await client.checkCompatibility({ subject, schema: schema(candidate) });
      console.log(`${candidate}: ${check.compatible ? "compatible" : "incompatible"}`);
      for (const reason of check.reasons) console.log(`  ${reason}`);
    }
  } finally {
    client.close();
  }
}

const { values } = parseArgs({
  options: {
    coordinators: { type: "string", default: "127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072" },
    registry: { type: "string", default: "127.0.0.1:7090" },
    file: { type: "string", default: "../../examples/copy.yaml" },
    schemas: { type: "string", default: "../../examples/schema_registry" },
    subject: { type: "string", default: "users-value" },
    "watch-seconds": { type: "string", default: "10" },
  },
});

try {
  if (await pipelineDemo(values.coordinators, values.file, Number(values["watch-seconds"]))) {
    await schemaDemo(values.registry, values.schemas, values.subject);
  } else {
    process.exitCode = 2;
  }
} catch (err) {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
}
