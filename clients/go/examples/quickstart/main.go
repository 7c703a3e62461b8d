// Command quickstart shows the Go client on a running Lockgate: it creates a pipeline from
// a pipeline file, watches its status, lists its checkpoints, then registers an Avro schema
// and checks a second one's compatibility.
//
//	make cluster-up
//	go run ./examples/quickstart -f ../../examples/copy.yaml \
//	    -schema ../../examples/schema_registry/user_v1.avsc \
//	    -compat ../../examples/schema_registry/user_v3_incompatible.avsc
//
// Flags name the coordinators (any replicas, comma-separated; $LOCKGATE_COORDINATOR) and the
// registry's gRPC address; the defaults are the local cluster's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/lockgate"
	"github.com/lockgate/lockgate/clients/go/pipelinefile"
)

func main() {
	coordinators := flag.String("coordinators", envOr("LOCKGATE_COORDINATOR", "127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072"), "coordinator addresses, comma-separated HOST:PORT")
	registryAddr := flag.String("registry", "127.0.0.1:7090", "schema registry gRPC address")
	file := flag.String("f", "", "pipeline file (YAML or JSON), as for `lockgate pipeline create -f`")
	watch := flag.Duration("watch", 5*time.Second, "how long to watch the pipeline's status")
	schemaFile := flag.String("schema", "", "Avro schema file to register")
	compatFile := flag.String("compat", "", "Avro schema file to check against the registered one")
	subject := flag.String("subject", "quickstart-value", "schema registry subject")
	flag.Parse()
	if *file == "" && *schemaFile == "" {
		fail(errors.New("give -f PIPELINE_FILE, -schema AVRO_FILE, or both"))
	}
	ctx := context.Background()
	if *file != "" {
		if err := runPipeline(ctx, strings.Split(*coordinators, ","), *file, *watch); err != nil {
			fail(err)
		}
	}
	if *schemaFile != "" {
		if err := runSchemas(ctx, *registryAddr, *subject, *schemaFile, *compatFile); err != nil {
			fail(err)
		}
	}
}

func runPipeline(ctx context.Context, addrs []string, file string, watch time.Duration) error {
	spec, err := pipelinefile.Read(file)
	if err != nil {
		return err
	}
	coord, err := lockgate.Dial(ctx, addrs)
	if err != nil {
		return err
	}
	defer coord.Close()

	call, cancel := context.WithTimeout(ctx, 15*time.Second)
	created, err := coord.CreatePipeline(call, &lockgatev1.CreatePipelineRequest{Spec: spec})
	cancel()
	var lerr *lockgate.Error
	switch {
	case errors.As(err, &lerr) && lerr.Code == codes.AlreadyExists:
		fmt.Printf("pipeline %s exists already\n", spec.GetName())
	case err != nil:
		return err // an INVALID_ARGUMENT prints every field violation
	default:
		fmt.Printf("created pipeline %s, config version %d\n", created.GetPipeline().GetName(), created.GetPipeline().GetConfigVersion())
	}

	for end := time.Now().Add(watch); ; {
		call, cancel := context.WithTimeout(ctx, 15*time.Second)
		status, err := coord.GetPipelineStatus(call, &lockgatev1.GetPipelineStatusRequest{Name: spec.GetName()})
		cancel()
		if err != nil {
			return err
		}
		var tasks []string
		for _, task := range status.GetTasks() {
			tasks = append(tasks, fmt.Sprintf("%d:%s@%s", task.GetTaskId().GetTaskIndex(),
				strings.TrimPrefix(task.GetState().String(), "TASK_STATE_"), task.GetExecutorId()))
		}
		fmt.Printf("%s  %s  tasks [%s]  last committed checkpoint %d\n", time.Now().Format(time.TimeOnly),
			strings.TrimPrefix(status.GetTargetState().String(), "TARGET_STATE_"), strings.Join(tasks, " "),
			status.GetLastCommittedCheckpointId())
		if time.Now().After(end) {
			break
		}
		time.Sleep(time.Second) // the refresh interval of the view
	}

	call, cancel = context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	checkpoints, err := coord.ListCheckpoints(call, &lockgatev1.ListCheckpointsRequest{PipelineName: spec.GetName(), PageSize: 5})
	if err != nil {
		return err
	}
	fmt.Println("newest checkpoints:")
	for _, c := range checkpoints.GetCheckpoints() {
		fmt.Printf("  %d  %s  %d ms  %d records read\n", c.GetCheckpointId(),
			strings.TrimPrefix(c.GetState().String(), "CHECKPOINT_STATE_"), c.GetTotalDurationMs(), c.GetCounts().GetRecordsRead())
	}
	return nil
}

func runSchemas(ctx context.Context, addr, subject, schemaFile, compatFile string) error {
	registry, err := lockgate.DialSchemaRegistry(ctx, []string{addr})
	if err != nil {
		return err
	}
	defer registry.Close()
	schema, err := os.ReadFile(schemaFile)
	if err != nil {
		return err
	}
	call, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	registered, err := registry.RegisterSchema(call, &lockgatev1.RegisterSchemaRequest{
		Subject: subject, Schema: string(schema), SchemaType: lockgatev1.SchemaType_SCHEMA_TYPE_AVRO,
	})
	if err != nil {
		return err
	}
	fmt.Printf("schema %s is id %d, version %d of %s (new: %t)\n", schemaFile, registered.GetSchemaId(), registered.GetVersion(), subject, registered.GetCreated())
	if compatFile == "" {
		return nil
	}
	candidate, err := os.ReadFile(compatFile)
	if err != nil {
		return err
	}
	verdict, err := registry.CheckCompatibility(call, &lockgatev1.CheckCompatibilityRequest{
		Subject: subject, Schema: string(candidate), SchemaType: lockgatev1.SchemaType_SCHEMA_TYPE_AVRO,
	})
	if err != nil {
		return err
	}
	fmt.Printf("%s is compatible with %s (%s): %t\n", compatFile, subject, strings.TrimPrefix(verdict.GetLevel().String(), "COMPATIBILITY_LEVEL_"), verdict.GetCompatible())
	for _, reason := range verdict.GetReasons() {
		fmt.Println("  -", reason)
	}
	return nil
}

func envOr(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "quickstart:", err)
	os.Exit(1)
}
