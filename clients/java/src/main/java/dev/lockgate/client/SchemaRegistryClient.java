package dev.lockgate.client;

import dev.lockgate.v1.*;
import dev.lockgate.v1.SchemaRegistryServiceGrpc.SchemaRegistryServiceBlockingStub;
import java.time.Duration;

/**
 * The schema registry's {@code lockgate.v1.SchemaRegistryService} (its gRPC side; the same store
 * answers the Confluent-compatible REST API). One method per RPC, retried on UNAVAILABLE within the
 * call's deadline, with a request_id filled in on mutating calls. A failed call throws {@link
 * LockgateException}, e.g. INVALID_ARGUMENT with the bad field for a schema that does not parse.
 * Thread-safe; get it from {@link LockgateClient#schemaRegistry()}.
 */
public final class SchemaRegistryClient {
  private final Calls<SchemaRegistryServiceBlockingStub> calls;

  SchemaRegistryClient(Calls<SchemaRegistryServiceBlockingStub> calls) {
    this.calls = calls;
  }

  /** The same client whose calls each get {@code timeout} as their deadline. */
  public SchemaRegistryClient withTimeout(Duration timeout) {
    return new SchemaRegistryClient(calls.withTimeout(timeout));
  }

  /** The address calls go to now (the last known leader, or a seed address). */
  public String currentAddress() {
    return calls.currentAddress();
  }

  /**
   * GetSchema returns the schema with a global id; ids stay resolvable after their versions are
   * deleted (records in Kafka still carry them).
   */
  public GetSchemaResponse getSchema(GetSchemaRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::getSchema);
  }

  /** ListSchemaVersions lists the (subject, version) pairs that use a schema id. */
  public ListSchemaVersionsResponse listSchemaVersions(ListSchemaVersionsRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::listSchemaVersions);
  }

  /**
   * RegisterSchema adds a schema as the next version of a subject, after checking it against the
   * subject's compatibility level; registering a schema that is already a live version of the
   * subject returns that version.
   */
  public RegisterSchemaResponse registerSchema(RegisterSchemaRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::registerSchema);
  }

  /**
   * LookupSchema finds the version of a subject that holds a given schema (compared after
   * normalisation).
   */
  public LookupSchemaResponse lookupSchema(LookupSchemaRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::lookupSchema);
  }

  /** ListSubjects lists subject names in lexical order. */
  public ListSubjectsResponse listSubjects(ListSubjectsRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::listSubjects);
  }

  /** ListSubjectVersions lists a subject's versions, oldest first. */
  public ListSubjectVersionsResponse listSubjectVersions(ListSubjectVersionsRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::listSubjectVersions);
  }

  /** GetSubjectVersion returns one version of a subject, or its latest live version. */
  public GetSubjectVersionResponse getSubjectVersion(GetSubjectVersionRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::getSubjectVersion);
  }

  /**
   * CheckCompatibility says whether a schema would be accepted by a subject, and every reason when
   * not, without registering it.
   */
  public CheckCompatibilityResponse checkCompatibility(CheckCompatibilityRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::checkCompatibility);
  }

  /** GetCompatibilityConfig returns the compatibility level of a subject or the global one. */
  public GetCompatibilityConfigResponse getCompatibilityConfig(
      GetCompatibilityConfigRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::getCompatibilityConfig);
  }

  /** UpdateCompatibilityConfig sets the compatibility level of a subject or the global one. */
  public UpdateCompatibilityConfigResponse updateCompatibilityConfig(
      UpdateCompatibilityConfigRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::updateCompatibilityConfig);
  }

  /**
   * DeleteCompatibilityConfig removes a subject's own level (it falls back to the global one) or
   * resets the global level to BACKWARD.
   */
  public DeleteCompatibilityConfigResponse deleteCompatibilityConfig(
      DeleteCompatibilityConfigRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::deleteCompatibilityConfig);
  }

  /**
   * DeleteSubject soft-deletes every live version of a subject, or, with permanent, removes a
   * subject that was soft-deleted before.
   */
  public DeleteSubjectResponse deleteSubject(DeleteSubjectRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::deleteSubject);
  }

  /**
   * DeleteSubjectVersion soft-deletes one version, or, with permanent, removes a version that was
   * soft-deleted before.
   */
  public DeleteSubjectVersionResponse deleteSubjectVersion(DeleteSubjectVersionRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::deleteSubjectVersion);
  }

  /**
   * ListReferencingSchemas lists the ids of the schemas that reference a version of a subject
   * (REST: /subjects/{subject}/versions/{version}/referencedby); while any does, the version cannot
   * be deleted.
   */
  public ListReferencingSchemasResponse listReferencingSchemas(
      ListReferencingSchemasRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::listReferencingSchemas);
  }

  /**
   * ListSchemas lists the versions of every subject whose name starts with a prefix, by subject
   * then version (REST: GET /schemas).
   */
  public ListSchemasResponse listSchemas(ListSchemasRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::listSchemas);
  }

  /** GetMode returns the mode of a subject or the global one. */
  public GetModeResponse getMode(GetModeRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::getMode);
  }

  /** UpdateMode sets the mode of a subject or the global one. */
  public UpdateModeResponse updateMode(UpdateModeRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::updateMode);
  }

  /**
   * DeleteMode removes a subject's own mode (it falls back to the global one) or resets the global
   * mode to READWRITE.
   */
  public DeleteModeResponse deleteMode(DeleteModeRequest request) {
    return calls.unary(request, SchemaRegistryServiceBlockingStub::deleteMode);
  }
}
