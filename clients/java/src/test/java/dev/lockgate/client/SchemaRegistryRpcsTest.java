package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.lockgate.client.testbed.RegistryRest;
import dev.lockgate.client.testbed.Testbed;
import dev.lockgate.client.testbed.TestbedExtension;
import dev.lockgate.v1.CheckCompatibilityRequest;
import dev.lockgate.v1.CheckCompatibilityResponse;
import dev.lockgate.v1.CompatibilityLevel;
import dev.lockgate.v1.DeleteCompatibilityConfigRequest;
import dev.lockgate.v1.DeleteModeRequest;
import dev.lockgate.v1.DeleteSubjectRequest;
import dev.lockgate.v1.DeleteSubjectVersionRequest;
import dev.lockgate.v1.GetCompatibilityConfigRequest;
import dev.lockgate.v1.GetModeRequest;
import dev.lockgate.v1.GetSchemaRequest;
import dev.lockgate.v1.GetSubjectVersionRequest;
import dev.lockgate.v1.ListReferencingSchemasRequest;
import dev.lockgate.v1.ListSchemaVersionsRequest;
import dev.lockgate.v1.ListSchemasRequest;
import dev.lockgate.v1.ListSubjectVersionsRequest;
import dev.lockgate.v1.ListSubjectsRequest;
import dev.lockgate.v1.LookupSchemaRequest;
import dev.lockgate.v1.Mode;
import dev.lockgate.v1.RegisterSchemaRequest;
import dev.lockgate.v1.RegisterSchemaResponse;
import dev.lockgate.v1.SchemaReference;
import dev.lockgate.v1.SubjectVersion;
import dev.lockgate.v1.SubjectVersionRef;
import dev.lockgate.v1.UpdateCompatibilityConfigRequest;
import dev.lockgate.v1.UpdateModeRequest;
import io.grpc.Status;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Every RPC of SchemaRegistryService, each checked through the registry's Confluent-compatible REST
 * API (java.net.http): what gRPC registered, configured or deleted is what REST answers.
 */
@ExtendWith(TestbedExtension.class)
class SchemaRegistryRpcsTest {
  static final String V1 =
      "{\"type\":\"record\",\"name\":\"User\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}";
  static final String V2 =
      "{\"type\":\"record\",\"name\":\"User\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"},"
          + "{\"name\":\"name\",\"type\":\"string\",\"default\":\"\"}]}";

  /** id turned into a string: neither BACKWARD nor FORWARD compatible with V1 or V2. */
  static final String INCOMPATIBLE =
      "{\"type\":\"record\",\"name\":\"User\",\"fields\":[{\"name\":\"id\",\"type\":\"string\"}]}";

  /** A named type other subjects' schemas take through a schema reference. */
  static final String ADDRESS =
      "{\"type\":\"record\",\"name\":\"Address\",\"fields\":"
          + "[{\"name\":\"street\",\"type\":\"string\"}]}";

  /** Uses {@link #ADDRESS} by name: valid only with a reference to a version holding it. */
  static final String CUSTOMER =
      "{\"type\":\"record\",\"name\":\"Customer\",\"fields\":"
          + "[{\"name\":\"id\",\"type\":\"long\"},"
          + "{\"name\":\"address\",\"type\":\"Address\"}]}";

  private static RegistryRest rest;
  private static LockgateClient lockgate;
  private static SchemaRegistryClient registry;

  @BeforeAll
  static void connect(Testbed testbed) {
    rest = new RegistryRest(testbed);
    lockgate = LockgateClient.builder().schemaRegistry(testbed.registryGrpc()).build();
    registry = lockgate.schemaRegistry();
  }

  @AfterAll
  static void close() {
    lockgate.close();
  }

  static JsonElement get(String path) {
    return rest.get(path);
  }

  static String schemaBody(String schema) {
    JsonObject body = new JsonObject();
    body.addProperty("schema", schema);
    return body.toString();
  }

  static List<String> subjects(String query) {
    return get("/subjects" + query).getAsJsonArray().asList().stream()
        .map(JsonElement::getAsString)
        .toList();
  }

  static List<Integer> versions(String subject) {
    return get("/subjects/" + subject + "/versions").getAsJsonArray().asList().stream()
        .map(JsonElement::getAsInt)
        .toList();
  }

  @Test
  void everyRpcAgreesWithTheRestApi() {
    String subject = "java-" + UUID.randomUUID().toString().substring(0, 8) + "-value";

    RegisterSchemaResponse first =
        registry.registerSchema(
            RegisterSchemaRequest.newBuilder().setSubject(subject).setSchema(V1).build());
    assertEquals(1, first.getVersion());
    assertTrue(first.getCreated());
    JsonObject v1 = get("/subjects/" + subject + "/versions/1").getAsJsonObject();
    assertEquals(first.getSchemaId(), v1.get("id").getAsInt());
    RegisterSchemaResponse again =
        registry.registerSchema(
            RegisterSchemaRequest.newBuilder().setSubject(subject).setSchema(V1).build());
    assertEquals(first.getSchemaId(), again.getSchemaId());
    assertFalse(again.getCreated(), "the same schema again is not a new version");

    String stored =
        registry
            .getSchema(GetSchemaRequest.newBuilder().setSchemaId(first.getSchemaId()).build())
            .getSchema()
            .getSchema();
    assertEquals(
        get("/schemas/ids/" + first.getSchemaId()).getAsJsonObject().get("schema").getAsString(),
        stored);

    RegisterSchemaResponse second =
        registry.registerSchema(
            RegisterSchemaRequest.newBuilder().setSubject(subject).setSchema(V2).build());
    assertEquals(2, second.getVersion());

    List<Integer> grpcVersions =
        registry
            .listSubjectVersions(
                ListSubjectVersionsRequest.newBuilder().setSubject(subject).build())
            .getVersionsList()
            .stream()
            .map(SubjectVersion::getVersion)
            .toList();
    assertEquals(List.of(1, 2), grpcVersions);
    assertEquals(grpcVersions, versions(subject));

    SubjectVersion latest =
        registry
            .getSubjectVersion(GetSubjectVersionRequest.newBuilder().setSubject(subject).build())
            .getSubjectVersion();
    assertEquals(2, latest.getVersion());
    assertEquals(
        latest.getSchemaId(),
        get("/subjects/" + subject + "/versions/latest").getAsJsonObject().get("id").getAsInt());

    SubjectVersion found =
        registry
            .lookupSchema(
                LookupSchemaRequest.newBuilder().setSubject(subject).setSchema(V1).build())
            .getSubjectVersion();
    assertEquals(1, found.getVersion());
    RegistryRest.Answer restLookup = rest.call("POST", "/subjects/" + subject, schemaBody(V1));
    assertEquals(200, restLookup.status(), () -> "REST lookup: " + restLookup.body());
    assertEquals(1, restLookup.json().getAsJsonObject().get("version").getAsInt());

    List<SubjectVersionRef> uses =
        registry
            .listSchemaVersions(
                ListSchemaVersionsRequest.newBuilder().setSchemaId(first.getSchemaId()).build())
            .getVersionsList();
    assertEquals(
        List.of(SubjectVersionRef.newBuilder().setSubject(subject).setVersion(1).build()), uses);
    JsonObject restUse =
        get("/schemas/ids/" + first.getSchemaId() + "/versions")
            .getAsJsonArray()
            .get(0)
            .getAsJsonObject();
    assertEquals(subject, restUse.get("subject").getAsString());

    assertTrue(
        registry
            .listSubjects(ListSubjectsRequest.getDefaultInstance())
            .getSubjectsList()
            .contains(subject));
    assertTrue(subjects("").contains(subject));

    CheckCompatibilityResponse breaking =
        registry.checkCompatibility(
            CheckCompatibilityRequest.newBuilder()
                .setSubject(subject)
                .setSchema(INCOMPATIBLE)
                .build());
    assertFalse(breaking.getCompatible());
    assertFalse(breaking.getReasonsList().isEmpty(), "an incompatible schema says why");
    RegistryRest.Answer restCheck =
        rest.call(
            "POST",
            "/compatibility/subjects/" + subject + "/versions/latest",
            schemaBody(INCOMPATIBLE));
    assertFalse(
        restCheck.json().getAsJsonObject().get("is_compatible").getAsBoolean(), restCheck::body);

    registry.updateCompatibilityConfig(
        UpdateCompatibilityConfigRequest.newBuilder()
            .setSubject(subject)
            .setLevel(CompatibilityLevel.COMPATIBILITY_LEVEL_FULL)
            .build());
    assertEquals(
        "FULL",
        get("/config/" + subject).getAsJsonObject().get("compatibilityLevel").getAsString());
    assertEquals(
        CompatibilityLevel.COMPATIBILITY_LEVEL_FULL,
        registry
            .getCompatibilityConfig(
                GetCompatibilityConfigRequest.newBuilder().setSubject(subject).build())
            .getLevel());
    assertEquals(
        CompatibilityLevel.COMPATIBILITY_LEVEL_FULL,
        registry
            .deleteCompatibilityConfig(
                DeleteCompatibilityConfigRequest.newBuilder().setSubject(subject).build())
            .getPreviousLevel());
    assertEquals(404, rest.call("GET", "/config/" + subject, null).status());

    DeleteSubjectVersionRequest deleteV2 =
        DeleteSubjectVersionRequest.newBuilder()
            .setRequestId(UUID.randomUUID().toString())
            .setSubject(subject)
            .setVersion(2)
            .build();
    assertEquals(2, registry.deleteSubjectVersion(deleteV2).getVersion());
    assertEquals(List.of(1), versions(subject));
    // A retry of that call (same request_id) gets the first answer; a new call (a new id,
    // filled by the client) is refused: version 2 is already soft-deleted (40406).
    assertEquals(2, registry.deleteSubjectVersion(deleteV2).getVersion());
    LockgateException newCall =
        assertThrows(
            LockgateException.class,
            () -> registry.deleteSubjectVersion(deleteV2.toBuilder().clearRequestId().build()));
    assertEquals(Status.Code.FAILED_PRECONDITION, newCall.getStatus().getCode());

    assertEquals(
        List.of(1),
        registry
            .deleteSubject(DeleteSubjectRequest.newBuilder().setSubject(subject).build())
            .getVersionsList());
    assertFalse(subjects("").contains(subject), "soft-deleted subjects are not listed");
    assertTrue(subjects("?deleted=true").contains(subject));
    registry.deleteSubject(
        DeleteSubjectRequest.newBuilder().setSubject(subject).setPermanent(true).build());
    assertFalse(subjects("?deleted=true").contains(subject), "permanently deleted");
  }

  static List<Integer> ints(JsonElement array) {
    return array.getAsJsonArray().asList().stream().map(JsonElement::getAsInt).toList();
  }

  static String confluentCode(LockgateException error) {
    return error.errorInfo().orElseThrow().getMetadataOrDefault("confluent_error_code", "");
  }

  @Test
  void referencesListingsAndModesAgreeWithTheRestApi() {
    String prefix = "java-" + UUID.randomUUID().toString().substring(0, 8) + "-";
    String address = prefix + "address";
    String customer = prefix + "customer";

    RegisterSchemaResponse addressV1 =
        registry.registerSchema(
            RegisterSchemaRequest.newBuilder().setSubject(address).setSchema(ADDRESS).build());
    SchemaReference reference =
        SchemaReference.newBuilder().setName("Address").setSubject(address).setVersion(1).build();
    RegisterSchemaResponse customerV1 =
        registry.registerSchema(
            RegisterSchemaRequest.newBuilder()
                .setSubject(customer)
                .setSchema(CUSTOMER)
                .addReferences(reference)
                .build());
    assertEquals(1, customerV1.getVersion());

    // ListReferencingSchemas: the customer's schema references address v1, as REST says.
    List<Integer> referencing =
        registry
            .listReferencingSchemas(
                ListReferencingSchemasRequest.newBuilder()
                    .setSubject(address)
                    .setVersion(1)
                    .build())
            .getSchemaIdsList();
    assertEquals(List.of(customerV1.getSchemaId()), referencing);
    assertEquals(referencing, ints(get("/subjects/" + address + "/versions/1/referencedby")));

    // ListSchemas: both subjects' versions under the prefix, by subject, as GET /schemas.
    List<SubjectVersion> listed =
        registry
            .listSchemas(ListSchemasRequest.newBuilder().setSubjectPrefix(prefix).build())
            .getVersionsList();
    List<String> grpcListed =
        listed.stream()
            .map(v -> v.getSubject() + "/" + v.getVersion() + "/" + v.getSchemaId())
            .toList();
    assertEquals(
        List.of(
            address + "/1/" + addressV1.getSchemaId(), customer + "/1/" + customerV1.getSchemaId()),
        grpcListed);
    assertEquals(List.of(reference), listed.get(1).getReferencesList());
    List<String> restListed =
        get("/schemas?subjectPrefix=" + prefix).getAsJsonArray().asList().stream()
            .map(JsonElement::getAsJsonObject)
            .map(
                v ->
                    v.get("subject").getAsString()
                        + "/"
                        + v.get("version").getAsInt()
                        + "/"
                        + v.get("id").getAsInt())
            .toList();
    assertEquals(grpcListed, restListed);

    // UpdateMode READONLY: REST reads it, GetMode too, and registrations are refused (42205).
    assertEquals(
        Mode.MODE_READONLY,
        registry
            .updateMode(
                UpdateModeRequest.newBuilder()
                    .setSubject(address)
                    .setMode(Mode.MODE_READONLY)
                    .build())
            .getMode());
    assertEquals("READONLY", get("/mode/" + address).getAsJsonObject().get("mode").getAsString());
    assertEquals(
        Mode.MODE_READONLY,
        registry.getMode(GetModeRequest.newBuilder().setSubject(address).build()).getMode());
    String addressV2 =
        ADDRESS.replace(
            "]}", ",{\"name\":\"city\",\"type\":\"string\",\"default\":\"\"}]}");
    RegisterSchemaRequest registerV2 =
        RegisterSchemaRequest.newBuilder().setSubject(address).setSchema(addressV2).build();
    LockgateException readOnly =
        assertThrows(LockgateException.class, () -> registry.registerSchema(registerV2));
    assertEquals(Status.Code.FAILED_PRECONDITION, readOnly.getStatus().getCode());
    assertEquals("42205", confluentCode(readOnly));
    RegistryRest.Answer restRegister =
        rest.call("POST", "/subjects/" + address + "/versions", schemaBody(addressV2));
    assertEquals(422, restRegister.status(), restRegister::body);
    assertEquals(
        42205,
        restRegister.json().getAsJsonObject().get("error_code").getAsInt(),
        restRegister::body);
    assertEquals(List.of(1), versions(address));

    // DeleteMode: the subject falls back to the global READWRITE and takes registrations again.
    assertEquals(
        Mode.MODE_READONLY,
        registry
            .deleteMode(DeleteModeRequest.newBuilder().setSubject(address).build())
            .getPreviousMode());
    RegistryRest.Answer ownMode = rest.call("GET", "/mode/" + address, null);
    assertEquals(404, ownMode.status(), ownMode::body);
    assertEquals(40409, ownMode.json().getAsJsonObject().get("error_code").getAsInt());
    assertEquals(
        "READWRITE",
        get("/mode/" + address + "?defaultToGlobal=true")
            .getAsJsonObject()
            .get("mode")
            .getAsString());
    LockgateException noOwnMode =
        assertThrows(
            LockgateException.class,
            () -> registry.getMode(GetModeRequest.newBuilder().setSubject(address).build()));
    assertEquals(Status.Code.NOT_FOUND, noOwnMode.getStatus().getCode());
    assertEquals("40409", confluentCode(noOwnMode));
    assertEquals(2, registry.registerSchema(registerV2).getVersion());

    // Clean up: the referrer first (permanently), then nothing references address v1.
    registry.deleteSubject(DeleteSubjectRequest.newBuilder().setSubject(customer).build());
    registry.deleteSubject(
        DeleteSubjectRequest.newBuilder().setSubject(customer).setPermanent(true).build());
    assertEquals(
        List.of(),
        registry
            .listReferencingSchemas(
                ListReferencingSchemasRequest.newBuilder()
                    .setSubject(address)
                    .setVersion(1)
                    .build())
            .getSchemaIdsList());
    assertEquals(List.of(), ints(get("/subjects/" + address + "/versions/1/referencedby")));
    registry.deleteSubject(DeleteSubjectRequest.newBuilder().setSubject(address).build());
    registry.deleteSubject(
        DeleteSubjectRequest.newBuilder().setSubject(address).setPermanent(true).build());
  }
}
