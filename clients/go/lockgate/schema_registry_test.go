package lockgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

const (
	orderV1  = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`
	orderV2  = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string","default":""}]}`
	orderBad = `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}`
)

// rest calls the registry's Confluent-compatible REST API and decodes the JSON answer into
// out (if not nil); it returns the HTTP status.
func rest(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var reader *bytes.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		reader = bytes.NewReader(encoded)
	} else {
		reader = bytes.NewReader(nil)
	}
	request, err := http.NewRequestWithContext(callCtx(t), method, tb.RegistryHTTP+path, reader)
	if err != nil {
		t.Fatal(err)
	}
	request.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer response.Body.Close()
	if out != nil && response.StatusCode == http.StatusOK {
		if err := json.NewDecoder(response.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return response.StatusCode
}

// TestSchemaRegistry calls every SchemaRegistryService RPC over gRPC and checks each effect
// through the registry's Confluent REST API (and the other way round for one subject).
func TestSchemaRegistry(t *testing.T) {
	needTestbed(t)
	registry, err := lockgate.DialSchemaRegistry(context.Background(), []string{tb.RegistryGRPC}, recorded)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = registry.Close() })
	const subject = "go-orders-value"
	avro := lockgatev1.SchemaType_SCHEMA_TYPE_AVRO

	// RegisterSchema, with the request_id semantics: a retry of one logical call (same id)
	// gets the first answer; a new call gets a new id and its own answer.
	first := &lockgatev1.RegisterSchemaRequest{RequestId: "go-test-register-1", Subject: subject, Schema: orderV1, SchemaType: avro}
	registered, err := registry.RegisterSchema(callCtx(t), first)
	if err != nil || !registered.GetCreated() || registered.GetVersion() != 1 {
		t.Fatalf("RegisterSchema: %v, %v", registered, err)
	}
	replayed, err := registry.RegisterSchema(callCtx(t), first)
	if err != nil || !replayed.GetCreated() || replayed.GetSchemaId() != registered.GetSchemaId() {
		t.Fatalf("RegisterSchema again with the same request_id: %v, %v; want the first answer (created)", replayed, err)
	}
	again := &lockgatev1.RegisterSchemaRequest{Subject: subject, Schema: orderV1, SchemaType: avro}
	fresh, err := registry.RegisterSchema(callCtx(t), again)
	if err != nil || fresh.GetCreated() || fresh.GetSchemaId() != registered.GetSchemaId() {
		t.Fatalf("RegisterSchema as a new call: %v, %v; want the existing version, not created", fresh, err)
	}
	if again.GetRequestId() != "" {
		t.Fatalf("the client wrote request_id %q into the caller's message", again.GetRequestId())
	}
	id := registered.GetSchemaId()
	var version struct {
		ID      int32  `json:"id"`
		Version int32  `json:"version"`
		Schema  string `json:"schema"`
	}
	if code := rest(t, "GET", "/subjects/"+subject+"/versions/1", nil, &version); code != 200 || version.ID != id {
		t.Fatalf("REST GET version 1: %d %+v, want id %d", code, version, id)
	}

	schema, err := registry.GetSchema(callCtx(t), &lockgatev1.GetSchemaRequest{SchemaId: id})
	var byID struct {
		Schema string `json:"schema"`
	}
	rest(t, "GET", fmt.Sprintf("/schemas/ids/%d", id), nil, &byID)
	if err != nil || schema.GetSchema().GetSchema() != byID.Schema || byID.Schema == "" {
		t.Fatalf("GetSchema(%d): %v, %v; REST has %q", id, schema, err, byID.Schema)
	}
	uses, err := registry.ListSchemaVersions(callCtx(t), &lockgatev1.ListSchemaVersionsRequest{SchemaId: id})
	if err != nil || len(uses.GetVersions()) != 1 || uses.GetVersions()[0].GetSubject() != subject {
		t.Fatalf("ListSchemaVersions(%d): %v, %v", id, uses, err)
	}
	found, err := registry.LookupSchema(callCtx(t), &lockgatev1.LookupSchemaRequest{Subject: subject, Schema: orderV1, SchemaType: avro})
	if err != nil || found.GetSubjectVersion().GetVersion() != 1 || found.GetSubjectVersion().GetSchemaId() != id {
		t.Fatalf("LookupSchema: %v, %v", found, err)
	}

	// A subject registered through REST is listed by gRPC.
	const restSubject = "go-rest-only-value"
	if code := rest(t, "POST", "/subjects/"+restSubject+"/versions", map[string]string{"schema": orderV1}, nil); code != 200 {
		t.Fatalf("REST register: HTTP %d", code)
	}
	subjects, err := registry.ListSubjects(callCtx(t), &lockgatev1.ListSubjectsRequest{})
	if err != nil || !slices.Contains(subjects.GetSubjects(), subject) || !slices.Contains(subjects.GetSubjects(), restSubject) {
		t.Fatalf("ListSubjects: %v, %v; want %s and %s", subjects, err, subject, restSubject)
	}

	// Compatibility level, then checks against it.
	full := lockgatev1.CompatibilityLevel_COMPATIBILITY_LEVEL_FULL
	if _, err := registry.UpdateCompatibilityConfig(callCtx(t), &lockgatev1.UpdateCompatibilityConfigRequest{Subject: subject, Level: full}); err != nil {
		t.Fatalf("UpdateCompatibilityConfig: %v", err)
	}
	var config struct {
		CompatibilityLevel string `json:"compatibilityLevel"`
	}
	if code := rest(t, "GET", "/config/"+subject, nil, &config); code != 200 || config.CompatibilityLevel != "FULL" {
		t.Fatalf("REST GET /config after UpdateCompatibilityConfig FULL: %d %+v", code, config)
	}
	level, err := registry.GetCompatibilityConfig(callCtx(t), &lockgatev1.GetCompatibilityConfigRequest{Subject: subject})
	if err != nil || level.GetLevel() != full {
		t.Fatalf("GetCompatibilityConfig: %v, %v", level, err)
	}
	compatible, err := registry.CheckCompatibility(callCtx(t), &lockgatev1.CheckCompatibilityRequest{Subject: subject, Schema: orderV2, SchemaType: avro})
	if err != nil || !compatible.GetCompatible() {
		t.Fatalf("CheckCompatibility of a field with a default: %v, %v", compatible, err)
	}
	incompatible, err := registry.CheckCompatibility(callCtx(t), &lockgatev1.CheckCompatibilityRequest{Subject: subject, Schema: orderBad, SchemaType: avro})
	if err != nil || incompatible.GetCompatible() || len(incompatible.GetReasons()) == 0 {
		t.Fatalf("CheckCompatibility of a field without a default: %v, %v", incompatible, err)
	}
	_, err = registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{Subject: subject, Schema: orderBad, SchemaType: avro})
	if lerr := asLockgateError(t, err); lerr.Code != codes.FailedPrecondition || len(lerr.PreconditionViolations) == 0 || lerr.Metadata["confluent_error_code"] != "409" {
		t.Fatalf("RegisterSchema of an incompatible schema: %#v, want FAILED_PRECONDITION, violations, code 409", err)
	}
	_, err = registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{Subject: subject, Schema: `{"type":"record"`, SchemaType: avro})
	if lerr := asLockgateError(t, err); lerr.Code != codes.InvalidArgument || lerr.Metadata["confluent_error_code"] != "42201" {
		t.Fatalf("RegisterSchema of bad JSON: %v, want INVALID_ARGUMENT 42201", err)
	}

	second, err := registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{Subject: subject, Schema: orderV2, SchemaType: avro})
	if err != nil || second.GetVersion() != 2 {
		t.Fatalf("RegisterSchema v2: %v, %v", second, err)
	}
	versions, err := registry.ListSubjectVersions(callCtx(t), &lockgatev1.ListSubjectVersionsRequest{Subject: subject})
	if err != nil || len(versions.GetVersions()) != 2 {
		t.Fatalf("ListSubjectVersions: %v, %v", versions, err)
	}
	got, err := registry.GetSubjectVersion(callCtx(t), &lockgatev1.GetSubjectVersionRequest{Subject: subject, Version: 2})
	if code := rest(t, "GET", "/subjects/"+subject+"/versions/2", nil, &version); err != nil || code != 200 ||
		got.GetSubjectVersion().GetSchemaId() != version.ID || got.GetSubjectVersion().GetSchema() != version.Schema {
		t.Fatalf("GetSubjectVersion 2: %v, %v; REST %d %+v", got, err, code, version)
	}

	// Deletes, each seen through REST.
	previous, err := registry.DeleteCompatibilityConfig(callCtx(t), &lockgatev1.DeleteCompatibilityConfigRequest{Subject: subject})
	if err != nil || previous.GetPreviousLevel() != full {
		t.Fatalf("DeleteCompatibilityConfig: %v, %v", previous, err)
	}
	if code := rest(t, "GET", "/config/"+subject, nil, nil); code != http.StatusNotFound {
		t.Fatalf("REST GET /config after DeleteCompatibilityConfig: HTTP %d, want 404", code)
	}
	_, err = registry.GetCompatibilityConfig(callCtx(t), &lockgatev1.GetCompatibilityConfigRequest{Subject: subject})
	if lerr := asLockgateError(t, err); lerr.Code != codes.NotFound || lerr.Metadata["confluent_error_code"] != "40408" {
		t.Fatalf("GetCompatibilityConfig without a level of its own: %v, want NOT_FOUND 40408", err)
	}
	if _, err := registry.DeleteSubjectVersion(callCtx(t), &lockgatev1.DeleteSubjectVersionRequest{Subject: subject, Version: 2}); err != nil {
		t.Fatalf("DeleteSubjectVersion: %v", err)
	}
	var live []int32
	if code := rest(t, "GET", "/subjects/"+subject+"/versions", nil, &live); code != 200 || !slices.Equal(live, []int32{1}) {
		t.Fatalf("REST versions after DeleteSubjectVersion 2: %d %v, want [1]", code, live)
	}
	deleted, err := registry.DeleteSubject(callCtx(t), &lockgatev1.DeleteSubjectRequest{Subject: subject})
	if err != nil || !slices.Equal(deleted.GetVersions(), []int32{1}) {
		t.Fatalf("DeleteSubject: %v, %v", deleted, err)
	}
	if _, err := registry.DeleteSubject(callCtx(t), &lockgatev1.DeleteSubjectRequest{Subject: subject, Permanent: true}); err != nil {
		t.Fatalf("DeleteSubject permanent: %v", err)
	}
	var remaining []string
	rest(t, "GET", "/subjects?deleted=true", nil, &remaining)
	if slices.Contains(remaining, subject) || !slices.Contains(remaining, restSubject) {
		t.Fatalf("REST subjects (deleted included) after a permanent delete: %v", remaining)
	}

	t.Run("ReferencesAndModes", func(t *testing.T) { referencesAndModes(t, registry) })
}

const (
	addressV1 = `{"type":"record","name":"Address","fields":[{"name":"street","type":"string"}]}`
	customer  = `{"type":"record","name":"Customer","fields":[{"name":"id","type":"long"},{"name":"address","type":"Address"}]}`
)

// referencesAndModes calls the RPCs of schema references, schema listing and modes (part
// of TestSchemaRegistry), each effect checked through the REST API: a schema referencing
// another subject's version, the listing of both, and a subject made READONLY then given
// back its default mode.
func referencesAndModes(t *testing.T, registry *lockgate.SchemaRegistry) {
	const (
		prefix          = "go-refs-"
		addressSubject  = prefix + "address"
		customerSubject = prefix + "customer-value"
	)
	avro := lockgatev1.SchemaType_SCHEMA_TYPE_AVRO

	// A schema under one subject referencing version 1 of another.
	address, err := registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{Subject: addressSubject, Schema: addressV1, SchemaType: avro})
	if err != nil || address.GetVersion() != 1 {
		t.Fatalf("RegisterSchema %s: %v, %v", addressSubject, address, err)
	}
	reference := &lockgatev1.SchemaReference{Name: "Address", Subject: addressSubject, Version: 1}
	referrer, err := registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{
		Subject: customerSubject, Schema: customer, SchemaType: avro, References: []*lockgatev1.SchemaReference{reference},
	})
	if err != nil || referrer.GetVersion() != 1 || referrer.GetSchemaId() == address.GetSchemaId() {
		t.Fatalf("RegisterSchema %s referencing %s v1: %v, %v", customerSubject, addressSubject, referrer, err)
	}

	// ListReferencingSchemas names the referrer, as REST's referencedby does.
	referencing, err := registry.ListReferencingSchemas(callCtx(t), &lockgatev1.ListReferencingSchemasRequest{Subject: addressSubject, Version: 1})
	if err != nil || !slices.Equal(referencing.GetSchemaIds(), []int32{referrer.GetSchemaId()}) {
		t.Fatalf("ListReferencingSchemas(%s, 1): %v, %v; want [%d]", addressSubject, referencing, err, referrer.GetSchemaId())
	}
	var referencedBy []int32
	if code := rest(t, "GET", "/subjects/"+addressSubject+"/versions/1/referencedby", nil, &referencedBy); code != 200 ||
		!slices.Equal(referencedBy, referencing.GetSchemaIds()) {
		t.Fatalf("REST referencedby: %d %v, gRPC says %v", code, referencedBy, referencing.GetSchemaIds())
	}
	_, err = registry.ListReferencingSchemas(callCtx(t), &lockgatev1.ListReferencingSchemasRequest{Subject: addressSubject, Version: 9})
	if lerr := asLockgateError(t, err); lerr.Code != codes.NotFound || lerr.Metadata["confluent_error_code"] != "40402" {
		t.Fatalf("ListReferencingSchemas of a missing version: %v, want NOT_FOUND 40402", err)
	}

	// ListSchemas by prefix lists both versions, by subject then version, as REST's /schemas.
	listed, err := registry.ListSchemas(callCtx(t), &lockgatev1.ListSchemasRequest{SubjectPrefix: prefix})
	if err != nil || len(listed.GetVersions()) != 2 {
		t.Fatalf("ListSchemas(%q): %v, %v; want 2 versions", prefix, listed, err)
	}
	first, second := listed.GetVersions()[0], listed.GetVersions()[1]
	if first.GetSubject() != addressSubject || first.GetSchemaId() != address.GetSchemaId() ||
		second.GetSubject() != customerSubject || second.GetSchemaId() != referrer.GetSchemaId() ||
		len(second.GetReferences()) != 1 || second.GetReferences()[0].GetSubject() != addressSubject ||
		second.GetReferences()[0].GetName() != "Address" || second.GetReferences()[0].GetVersion() != 1 {
		t.Fatalf("ListSchemas(%q): %v", prefix, listed.GetVersions())
	}
	var schemas []struct {
		Subject string `json:"subject"`
		Version int32  `json:"version"`
		ID      int32  `json:"id"`
		Schema  string `json:"schema"`
	}
	if code := rest(t, "GET", "/schemas?subjectPrefix="+prefix, nil, &schemas); code != 200 || len(schemas) != len(listed.GetVersions()) {
		t.Fatalf("REST GET /schemas?subjectPrefix=%s: %d %+v, gRPC lists %v", prefix, code, schemas, listed.GetVersions())
	}
	for i, version := range listed.GetVersions() {
		if got := schemas[i]; got.Subject != version.GetSubject() || got.Version != version.GetVersion() ||
			got.ID != version.GetSchemaId() || got.Schema != version.GetSchema() {
			t.Fatalf("REST /schemas[%d] = %+v, gRPC ListSchemas has %v", i, got, version)
		}
	}

	// UpdateMode READONLY on one subject: REST sees it and a registration there is refused.
	readonly := lockgatev1.Mode_MODE_READONLY
	updated, err := registry.UpdateMode(callCtx(t), &lockgatev1.UpdateModeRequest{Subject: addressSubject, Mode: readonly})
	if err != nil || updated.GetMode() != readonly {
		t.Fatalf("UpdateMode %s READONLY: %v, %v", addressSubject, updated, err)
	}
	var mode struct {
		Mode string `json:"mode"`
	}
	if code := rest(t, "GET", "/mode/"+addressSubject, nil, &mode); code != 200 || mode.Mode != "READONLY" {
		t.Fatalf("REST GET /mode/%s after UpdateMode READONLY: %d %+v", addressSubject, code, mode)
	}
	got, err := registry.GetMode(callCtx(t), &lockgatev1.GetModeRequest{Subject: addressSubject})
	if err != nil || got.GetMode() != readonly {
		t.Fatalf("GetMode %s: %v, %v; want READONLY", addressSubject, got, err)
	}
	const addressV2 = `{"type":"record","name":"Address","fields":[{"name":"street","type":"string"},{"name":"city","type":"string","default":""}]}`
	_, err = registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{Subject: addressSubject, Schema: addressV2, SchemaType: avro})
	if lerr := asLockgateError(t, err); lerr.Code != codes.FailedPrecondition || lerr.Metadata["confluent_error_code"] != "42205" {
		t.Fatalf("RegisterSchema on a READONLY subject: %v, want FAILED_PRECONDITION 42205", err)
	}
	var live []int32
	if code := rest(t, "GET", "/subjects/"+addressSubject+"/versions", nil, &live); code != 200 || !slices.Equal(live, []int32{1}) {
		t.Fatalf("REST versions of the READONLY subject after a refused registration: %d %v, want [1]", code, live)
	}

	// DeleteMode: the subject has no mode of its own again and falls back to READWRITE.
	deleted, err := registry.DeleteMode(callCtx(t), &lockgatev1.DeleteModeRequest{Subject: addressSubject})
	if err != nil || deleted.GetPreviousMode() != readonly {
		t.Fatalf("DeleteMode %s: %v, %v; want previous READONLY", addressSubject, deleted, err)
	}
	mode.Mode = ""
	if code := rest(t, "GET", "/mode/"+addressSubject+"?defaultToGlobal=true", nil, &mode); code != 200 || mode.Mode != "READWRITE" {
		t.Fatalf("REST GET /mode/%s?defaultToGlobal=true after DeleteMode: %d %+v, want READWRITE", addressSubject, code, mode)
	}
	if code := rest(t, "GET", "/mode/"+addressSubject, nil, nil); code != http.StatusNotFound {
		t.Fatalf("REST GET /mode/%s after DeleteMode: HTTP %d, want 404", addressSubject, code)
	}
	_, err = registry.GetMode(callCtx(t), &lockgatev1.GetModeRequest{Subject: addressSubject})
	if lerr := asLockgateError(t, err); lerr.Code != codes.NotFound || lerr.Metadata["confluent_error_code"] != "40409" {
		t.Fatalf("GetMode of a subject without a mode of its own: %v, want NOT_FOUND 40409", err)
	}
	global, err := registry.GetMode(callCtx(t), &lockgatev1.GetModeRequest{Subject: addressSubject, DefaultToGlobal: true})
	if err != nil || global.GetMode() != lockgatev1.Mode_MODE_READWRITE {
		t.Fatalf("GetMode %s default_to_global: %v, %v; want READWRITE", addressSubject, global, err)
	}
	again, err := registry.RegisterSchema(callCtx(t), &lockgatev1.RegisterSchemaRequest{Subject: addressSubject, Schema: addressV2, SchemaType: avro})
	if err != nil || again.GetVersion() != 2 {
		t.Fatalf("RegisterSchema after DeleteMode: %v, %v; want version 2", again, err)
	}
}
