// Package pipelinefile reads the pipeline files of `lockgate pipeline create -f` (YAML or
// JSON) as a lockgatev1.PipelineSpec, with the same conveniences as the Python CLI
// (clients/python/lockgate/client/pipeline_file.py, whose tests this package's test compares
// against): a file has the shape of the PipelineSpec message with proto field names; enum
// values may be written short and in any case (`delivery: exactly_once`,
// `starting_offsets: earliest`); `format: json` stands for `format: {value_format: json}`.
// Every unknown key and enum value is reported at once. The fields' values are checked by
// the coordinator (ValidatePipeline, CreatePipeline), not here.
package pipelinefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
)

// Read reads the pipeline file at path.
func Read(path string) (*lockgatev1.PipelineSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	spec, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// Parse reads a pipeline file's content; the error names every bad key, one per line.
func Parse(data []byte) (*lockgatev1.PipelineSpec, error) {
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not valid YAML/JSON: %w", err)
	}
	if _, ok := asMapping(raw); !ok {
		return nil, errors.New("a pipeline file must hold a mapping (name, source, sink, ...)")
	}
	spec := &lockgatev1.PipelineSpec{}
	var problems []string
	normalized := normalize(spec.ProtoReflect().Descriptor(), raw, "", &problems)
	if len(problems) == 1 {
		return nil, errors.New(problems[0])
	}
	if len(problems) > 1 {
		return nil, errors.New("\n  " + strings.Join(problems, "\n  "))
	}
	encoded, err := json.Marshal(normalized)
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(encoded, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

func asMapping(raw any) (map[string]any, bool) {
	switch m := raw.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

// normalize expands the file's shorthands into the proto JSON mapping of message, adding
// every unknown key and enum value to problems.
func normalize(message protoreflect.MessageDescriptor, raw any, path string, problems *[]string) any {
	if text, ok := raw.(string); ok && message.FullName() == "lockgate.v1.FormatSpec" {
		raw = map[string]any{"value_format": text}
	}
	mapping, ok := asMapping(raw)
	if !ok {
		return raw
	}
	out := make(map[string]any, len(mapping))
	keys := make([]string, 0, len(mapping))
	for key := range mapping {
		keys = append(keys, key)
	}
	sort.Strings(keys) // problems in a stable order
	for _, key := range keys {
		value := mapping[key]
		where := key
		if path != "" {
			where = path + "." + key
		}
		field := message.Fields().ByName(protoreflect.Name(key))
		if field == nil {
			*problems = append(*problems, fmt.Sprintf("%s: unknown field; %s has: %s", where, message.Name(), fieldNames(message)))
			continue
		}
		switch field.Kind() {
		case protoreflect.EnumKind:
			if list, isList := value.([]any); isList {
				for i, item := range list {
					list[i] = enumName(field.Enum(), item, where, problems)
				}
			} else {
				value = enumName(field.Enum(), value, where, problems)
			}
		case protoreflect.MessageKind:
			if list, isList := value.([]any); isList {
				for i, item := range list {
					list[i] = normalize(field.Message(), item, where+"[]", problems)
				}
			} else {
				value = normalize(field.Message(), value, where, problems)
			}
		}
		out[key] = value
	}
	return out
}

func fieldNames(message protoreflect.MessageDescriptor) string {
	names := make([]string, message.Fields().Len())
	for i := range names {
		names[i] = string(message.Fields().Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// enumName is the full enum value name a short one stands for ("earliest" ->
// "OFFSET_POSITION_EARLIEST"); an unknown one is added to problems with the choices.
func enumName(enum protoreflect.EnumDescriptor, value any, path string, problems *[]string) any {
	text, ok := value.(string)
	if !ok {
		return value
	}
	wanted := strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(text)), "-", "_")
	values := enum.Values()
	var choices []string
	prefix := ""
	for i := range values.Len() {
		name := string(values.Get(i).Name())
		if name == wanted || strings.HasSuffix(name, "_"+wanted) {
			return name
		}
		if strings.HasSuffix(name, "_UNSPECIFIED") {
			prefix = strings.TrimSuffix(name, "UNSPECIFIED")
		}
	}
	for i := range values.Len() {
		if name := string(values.Get(i).Name()); !strings.HasSuffix(name, "_UNSPECIFIED") {
			choices = append(choices, strings.ToLower(strings.TrimPrefix(name, prefix)))
		}
	}
	*problems = append(*problems, fmt.Sprintf("%s: %q is not one of: %s", path, text, strings.Join(choices, ", ")))
	return value
}
