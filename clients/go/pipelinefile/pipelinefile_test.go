package pipelinefile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/internal/testbed"
	"github.com/lockgate/lockgate/clients/go/pipelinefile"
)

// shorthands uses every convenience of the file format.
const shorthands = `
name: shorthands
source:
  kafka: {bootstrap_servers: "127.0.0.1:9092", topics: [a, b], starting_offsets: Latest, format: json}
sink: {kafka: {bootstrap_servers: "127.0.0.1:9092", topic: out, format: {key_format: string, value_format: avro, schema_registry_url: "http://127.0.0.1:8081"}}}
delivery: at-least-once
checkpoint: {interval_ms: 500}
errors: {tolerance: all, dead_letter_topic: dlq}
`

// pythonSpec is the Python CLI's reading of the file at path.
func pythonSpec(t *testing.T, path string) *lockgatev1.PipelineSpec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := testbed.RunPython(ctx, "-c", `import sys
from pathlib import Path
from google.protobuf import json_format
from lockgate.client.pipeline_file import read_spec_file
print(json_format.MessageToJson(read_spec_file(Path(sys.argv[1]))))`, path)
	if err != nil {
		t.Fatal(err)
	}
	spec := &lockgatev1.PipelineSpec{}
	if err := protojson.Unmarshal(out, spec); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return spec
}

// TestSameSpecAsTheCLI reads the repository's example and a file of shorthands in Go and
// in Python: the specs must be equal (the two readers must not drift).
func TestSameSpecAsTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Python (not under -short)")
	}
	written := filepath.Join(t.TempDir(), "shorthands.yaml")
	if err := os.WriteFile(written, []byte(shorthands), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"../../../examples/copy.yaml", written} {
		got, err := pipelinefile.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := pythonSpec(t, path); !proto.Equal(got, want) {
			t.Errorf("%s: Go reads %v, the CLI %v", path, got, want)
		}
	}
}

func TestShorthands(t *testing.T) {
	spec, err := pipelinefile.Parse([]byte(shorthands))
	if err != nil {
		t.Fatal(err)
	}
	source := spec.GetSource().GetKafka()
	if source.GetStartingOffsets() != lockgatev1.OffsetPosition_OFFSET_POSITION_LATEST ||
		source.GetFormat().GetValueFormat() != lockgatev1.DataFormat_DATA_FORMAT_JSON ||
		spec.GetDelivery() != lockgatev1.DeliveryGuarantee_DELIVERY_GUARANTEE_AT_LEAST_ONCE ||
		spec.GetSink().GetKafka().GetFormat().GetKeyFormat() != lockgatev1.DataFormat_DATA_FORMAT_STRING {
		t.Fatalf("shorthands read as %v", spec)
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	_, err := pipelinefile.Parse([]byte("name: x\nsorce: {}\ndelivery: twice\ncheckpoint: {interval: 5}\n"))
	if err == nil {
		t.Fatal("a file with three mistakes was accepted")
	}
	for _, want := range []string{
		"sorce: unknown field; PipelineSpec has: name, source,",
		`delivery: "twice" is not one of: exactly_once, at_least_once`,
		"checkpoint.interval: unknown field; CheckpointSpec has: interval_ms",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := pipelinefile.Parse([]byte("- a list")); err == nil || !strings.Contains(err.Error(), "mapping") {
		t.Errorf("a list was read as a pipeline: %v", err)
	}
}
