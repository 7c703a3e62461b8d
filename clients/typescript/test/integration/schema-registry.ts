// SchemaRegistryService over gRPC from TypeScript, every effect read back through the
// registry's Confluent-compatible REST API with fetch.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import {
  Code,
  CompatibilityLevel,
  LockgateError,
  Mode,
  type SchemaRegistryClient,
  createSchemaRegistryClient,
} from "../../src/index.js";
import type { Testbed } from "../support/testbed.js";

const V1 = JSON.stringify({ type: "record", name: "Order", fields: [{ name: "id", type: "string" }] });
const V2 = JSON.stringify({
  type: "record",
  name: "Order",
  fields: [
    { name: "id", type: "string" },
    { name: "amount", type: "long", default: 0 },
  ],
});
const BREAKING = JSON.stringify({ type: "record", name: "Order", fields: [{ name: "id", type: "int" }] });
const ADDRESS = JSON.stringify({ type: "record", name: "Address", fields: [{ name: "street", type: "string" }] });
const ADDRESS_V2 = JSON.stringify({
  type: "record",
  name: "Address",
  fields: [
    { name: "street", type: "string" },
    { name: "city", type: "string", default: "" },
  ],
});
const CUSTOMER = JSON.stringify({
  type: "record",
  name: "Customer",
  fields: [
    { name: "name", type: "string" },
    { name: "address", type: "Address" },
  ],
});

export function schemaRegistrySuite(bed: () => Testbed): void {
  describe("SchemaRegistryService", () => {
    let registry: SchemaRegistryClient;
    const subject = `ts-${randomUUID().slice(0, 8)}-value`;
    let schemaId = 0;

    async function rest<T>(method: string, path: string, body?: unknown): Promise<{ status: number; json: T }> {
      const response = await fetch(`${bed().info.registry_http}${path}`, {
        method,
        headers: { "content-type": "application/vnd.schemaregistry.v1+json" },
        ...(body !== undefined && { body: JSON.stringify(body) }),
      });
      return { status: response.status, json: (await response.json()) as T };
    }

    before(() => {
      registry = createSchemaRegistryClient(bed().info.registry_grpc);
    });
    after(() => registry.close());

    test("RegisterSchema: the version is read back over REST", async () => {
      const registered = await registry.registerSchema({ subject, schema: V1 });
      assert.equal(registered.version, 1);
      assert.equal(registered.created, true);
      schemaId = registered.schemaId;
      const { json } = await rest<{ id: number; version: number; schema: string }>(
        "GET",
        `/subjects/${subject}/versions/1`,
      );
      assert.equal(json.id, schemaId);
      assert.deepEqual(JSON.parse(json.schema), JSON.parse(V1));
    });

    test("GetSchema and ListSchemaVersions agree with REST /schemas/ids", async () => {
      const got = await registry.getSchema({ schemaId });
      const { json } = await rest<{ schema: string }>("GET", `/schemas/ids/${schemaId}`);
      assert.equal(got.schema?.schema, json.schema);
      const versions = await registry.listSchemaVersions({ schemaId });
      const viaRest = await rest<{ subject: string; version: number }[]>("GET", `/schemas/ids/${schemaId}/versions`);
      assert.deepEqual(
        versions.versions.map((v) => ({ subject: v.subject, version: v.version })),
        viaRest.json,
      );
      assert.ok(viaRest.json.some((v) => v.subject === subject && v.version === 1));
    });

    test("LookupSchema and ListSubjects agree with REST", async () => {
      const found = await registry.lookupSchema({ subject, schema: V1 });
      const viaRest = await rest<{ version: number; id: number }>("POST", `/subjects/${subject}`, { schema: V1 });
      assert.equal(found.subjectVersion?.version, viaRest.json.version);
      assert.equal(found.subjectVersion?.schemaId, viaRest.json.id);
      const subjects = await registry.listSubjects({});
      const subjectsRest = await rest<string[]>("GET", "/subjects");
      assert.ok(subjects.subjects.includes(subject));
      assert.deepEqual(subjects.subjects, subjectsRest.json);
    });

    test("UpdateCompatibilityConfig is read back over REST; GetCompatibilityConfig agrees", async () => {
      const updated = await registry.updateCompatibilityConfig({ subject, level: CompatibilityLevel.FULL });
      assert.equal(updated.level, CompatibilityLevel.FULL);
      const { json } = await rest<{ compatibilityLevel: string }>("GET", `/config/${subject}`);
      assert.equal(json.compatibilityLevel, "FULL");
      const got = await registry.getCompatibilityConfig({ subject });
      assert.equal(got.level, CompatibilityLevel.FULL);
    });

    test("CheckCompatibility agrees with REST /compatibility, reasons included", async () => {
      const ok = await registry.checkCompatibility({ subject, schema: V2 });
      assert.equal(ok.compatible, true);
      assert.equal(ok.level, CompatibilityLevel.FULL);
      const bad = await registry.checkCompatibility({ subject, schema: BREAKING });
      assert.equal(bad.compatible, false);
      assert.ok(bad.reasons.length > 0);
      const viaRest = await rest<{ is_compatible: boolean }>(
        "POST",
        `/compatibility/subjects/${subject}/versions/latest`,
        { schema: BREAKING },
      );
      assert.equal(viaRest.json.is_compatible, false);
    });

    test("RegisterSchema of an incompatible schema fails with FAILED_PRECONDITION and Confluent's 409", async () => {
      await assert.rejects(registry.registerSchema({ subject, schema: BREAKING }), (err: unknown) => {
        assert.ok(err instanceof LockgateError);
        assert.equal(err.code, Code.FailedPrecondition);
        assert.equal(err.metadata["confluent_error_code"], "409");
        return true;
      });
    });

    test("ListSubjectVersions and GetSubjectVersion (latest) agree with REST", async () => {
      const second = await registry.registerSchema({ subject, schema: V2 });
      assert.equal(second.version, 2);
      const versions = await registry.listSubjectVersions({ subject });
      const viaRest = await rest<number[]>("GET", `/subjects/${subject}/versions`);
      assert.deepEqual(
        versions.versions.map((v) => v.version),
        viaRest.json,
      );
      assert.deepEqual(viaRest.json, [1, 2]);
      const latest = await registry.getSubjectVersion({ subject, version: 0 });
      const latestRest = await rest<{ version: number; id: number }>("GET", `/subjects/${subject}/versions/latest`);
      assert.equal(latest.subjectVersion?.version, 2);
      assert.equal(latest.subjectVersion?.schemaId, latestRest.json.id);
    });

    test("DeleteSubjectVersion: REST lists the remaining version only", async () => {
      const deleted = await registry.deleteSubjectVersion({ subject, version: 1 });
      assert.equal(deleted.version, 1);
      const { json } = await rest<number[]>("GET", `/subjects/${subject}/versions`);
      assert.deepEqual(json, [2]);
    });

    test("DeleteCompatibilityConfig: REST finds no subject level any more (40408)", async () => {
      const deleted = await registry.deleteCompatibilityConfig({ subject });
      assert.equal(deleted.previousLevel, CompatibilityLevel.FULL);
      const { status, json } = await rest<{ error_code: number }>("GET", `/config/${subject}`);
      assert.equal(status, 404);
      assert.equal(json.error_code, 40408);
    });

    test("DeleteSubject: REST lists the subject only with ?deleted=true", async () => {
      const deleted = await registry.deleteSubject({ subject });
      assert.deepEqual(deleted.versions, [2]);
      assert.ok(!(await rest<string[]>("GET", "/subjects")).json.includes(subject));
      assert.ok((await rest<string[]>("GET", "/subjects?deleted=true")).json.includes(subject));
    });

    test("an invalid schema surfaces INVALID_ARGUMENT with Confluent's 42201", async () => {
      await assert.rejects(registry.registerSchema({ subject, schema: "{not avro" }), (err: unknown) => {
        assert.ok(err instanceof LockgateError);
        assert.equal(err.codeName, "INVALID_ARGUMENT");
        assert.equal(err.metadata["confluent_error_code"], "42201");
        return true;
      });
    });

    // References, ListSchemas and modes, on subjects of their own under one prefix.
    const prefix = `ts-${randomUUID().slice(0, 8)}-`;
    const addressSubject = `${prefix}address`;
    const customerSubject = `${prefix}customer`;
    let addressId = 0;
    let customerId = 0;

    test("ListReferencingSchemas: a referencing schema's id, as REST .../referencedby lists it", async () => {
      const address = await registry.registerSchema({ subject: addressSubject, schema: ADDRESS });
      assert.equal(address.version, 1);
      addressId = address.schemaId;
      const customer = await registry.registerSchema({
        subject: customerSubject,
        schema: CUSTOMER,
        references: [{ name: "Address", subject: addressSubject, version: 1 }],
      });
      assert.equal(customer.version, 1);
      customerId = customer.schemaId;
      assert.notEqual(customerId, addressId);
      const referencing = await registry.listReferencingSchemas({ subject: addressSubject, version: 1 });
      assert.deepEqual(referencing.schemaIds, [customerId]);
      assert.equal(referencing.nextPageToken, "");
      const viaRest = await rest<number[]>("GET", `/subjects/${addressSubject}/versions/1/referencedby`);
      assert.equal(viaRest.status, 200);
      assert.deepEqual(viaRest.json, referencing.schemaIds);
      // Nothing references the referrer.
      const none = await registry.listReferencingSchemas({ subject: customerSubject, version: 1 });
      assert.deepEqual(none.schemaIds, []);
    });

    test("ListSchemas with subjectPrefix agrees with REST /schemas?subjectPrefix=", async () => {
      const listed = await registry.listSchemas({ subjectPrefix: prefix });
      assert.deepEqual(
        listed.versions.map((v) => ({ subject: v.subject, version: v.version, id: v.schemaId })),
        [
          { subject: addressSubject, version: 1, id: addressId },
          { subject: customerSubject, version: 1, id: customerId },
        ],
      );
      const customer = listed.versions.find((v) => v.subject === customerSubject);
      assert.deepEqual(
        customer?.references.map((r) => ({ name: r.name, subject: r.subject, version: r.version })),
        [{ name: "Address", subject: addressSubject, version: 1 }],
      );
      const viaRest = await rest<{ subject: string; version: number; id: number }[]>(
        "GET",
        `/schemas?subjectPrefix=${encodeURIComponent(prefix)}`,
      );
      assert.equal(viaRest.status, 200);
      assert.deepEqual(
        viaRest.json.map((v) => ({ subject: v.subject, version: v.version, id: v.id })),
        listed.versions.map((v) => ({ subject: v.subject, version: v.version, id: v.schemaId })),
      );
    });

    test("UpdateMode READONLY is read back over REST, GetMode agrees, a registration is refused (42205)", async () => {
      const updated = await registry.updateMode({ subject: addressSubject, mode: Mode.READONLY });
      assert.equal(updated.mode, Mode.READONLY);
      const { status, json } = await rest<{ mode: string }>("GET", `/mode/${addressSubject}`);
      assert.equal(status, 200);
      assert.equal(json.mode, "READONLY");
      const got = await registry.getMode({ subject: addressSubject });
      assert.equal(got.mode, Mode.READONLY);
      await assert.rejects(registry.registerSchema({ subject: addressSubject, schema: ADDRESS_V2 }), (err: unknown) => {
        assert.ok(err instanceof LockgateError);
        assert.equal(err.code, Code.FailedPrecondition);
        assert.equal(err.metadata["confluent_error_code"], "42205");
        return true;
      });
      const versions = await rest<number[]>("GET", `/subjects/${addressSubject}/versions`);
      assert.deepEqual(versions.json, [1]);
      // Other subjects keep the global mode.
      const other = await rest<{ mode: string }>("GET", `/mode/${customerSubject}?defaultToGlobal=true`);
      assert.equal(other.json.mode, "READWRITE");
    });

    test("DeleteMode: REST finds no subject mode (40409) and falls back to READWRITE; registering works again", async () => {
      const deleted = await registry.deleteMode({ subject: addressSubject });
      assert.equal(deleted.previousMode, Mode.READONLY);
      const fallback = await rest<{ mode: string }>("GET", `/mode/${addressSubject}?defaultToGlobal=true`);
      assert.equal(fallback.status, 200);
      assert.equal(fallback.json.mode, "READWRITE");
      const own = await rest<{ error_code: number }>("GET", `/mode/${addressSubject}`);
      assert.equal(own.status, 404);
      assert.equal(own.json.error_code, 40409);
      await assert.rejects(registry.getMode({ subject: addressSubject }), (err: unknown) => {
        assert.ok(err instanceof LockgateError);
        assert.equal(err.code, Code.NotFound);
        assert.equal(err.metadata["confluent_error_code"], "40409");
        return true;
      });
      const viaGlobal = await registry.getMode({ subject: addressSubject, defaultToGlobal: true });
      assert.equal(viaGlobal.mode, Mode.READWRITE);
      const second = await registry.registerSchema({ subject: addressSubject, schema: ADDRESS_V2 });
      assert.equal(second.version, 2);
      assert.deepEqual((await rest<number[]>("GET", `/subjects/${addressSubject}/versions`)).json, [1, 2]);
    });
  });
}
