package dev.lockgate.client;

import com.google.gson.Gson;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumDescriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.util.JsonFormat;
import dev.lockgate.v1.PipelineSpec;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;
import org.yaml.snakeyaml.error.YAMLException;

/**
 * Pipeline files, as {@code lockgate pipeline create -f} reads them
 * (clients/python/lockgate/client/pipeline_file.py): YAML or JSON with the shape of {@code
 * lockgate.v1.PipelineSpec}, plus two conveniences: enum values may be written short and lower-case
 * ({@code delivery: exactly_once}, {@code starting_offsets: earliest}), and {@code format: json}
 * stands for {@code format: {value_format: json}}. Every unknown key and enum value is reported at
 * once. The fields' values are checked by the coordinator (ValidatePipeline).
 */
public final class PipelineFiles {
  private PipelineFiles() {}

  /** A pipeline file that cannot be read as a PipelineSpec; the message names each bad field. */
  public static final class PipelineFileException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    PipelineFileException(String message) {
      super(message);
    }
  }

  /** Reads a YAML or JSON pipeline file. */
  public static PipelineSpec read(Path path) {
    String text;
    try {
      text = Files.readString(path);
    } catch (IOException e) {
      throw new PipelineFileException("cannot read " + path + ": " + e.getMessage());
    }
    try {
      return parse(text);
    } catch (PipelineFileException e) {
      throw new PipelineFileException(path + ": " + e.getMessage());
    }
  }

  /** Parses the text of a YAML or JSON pipeline file. */
  public static PipelineSpec parse(String text) {
    Object raw;
    try {
      raw = new Yaml(new SafeConstructor(new LoaderOptions())).load(text);
    } catch (YAMLException e) {
      throw new PipelineFileException("not valid YAML/JSON: " + e.getMessage());
    }
    if (!(raw instanceof Map<?, ?>)) {
      throw new PipelineFileException(
          "a pipeline file must hold a mapping (name, source, sink, ...)");
    }
    List<String> errors = new ArrayList<>();
    Object normalized = normalize(PipelineSpec.getDescriptor(), raw, "", errors);
    if (!errors.isEmpty()) {
      throw new PipelineFileException(
          errors.size() == 1 ? errors.get(0) : "\n  " + String.join("\n  ", errors));
    }
    PipelineSpec.Builder spec = PipelineSpec.newBuilder();
    try {
      JsonFormat.parser().merge(new Gson().toJson(normalized), spec);
    } catch (InvalidProtocolBufferException e) {
      throw new PipelineFileException(e.getMessage());
    }
    return spec.build();
  }

  /**
   * The proto JSON mapping of {@code raw} read as {@code descriptor}, shorthands expanded; unknown
   * keys and enum values are added to {@code errors}, all of them.
   */
  private static Object normalize(
      Descriptor descriptor, Object raw, String path, List<String> errors) {
    if (descriptor.getFullName().equals("lockgate.v1.FormatSpec") && raw instanceof String) {
      raw = Map.of("value_format", raw);
    }
    if (!(raw instanceof Map<?, ?> mapping)) {
      return raw;
    }
    Map<String, Object> result = new LinkedHashMap<>();
    for (Map.Entry<?, ?> entry : mapping.entrySet()) {
      String key = String.valueOf(entry.getKey());
      String where = path.isEmpty() ? key : path + "." + key;
      FieldDescriptor field = descriptor.findFieldByName(key);
      if (field == null) {
        String known =
            descriptor.getFields().stream()
                .map(FieldDescriptor::getName)
                .collect(Collectors.joining(", "));
        errors.add(where + ": unknown field; " + descriptor.getName() + " has: " + known);
        continue;
      }
      Object value = entry.getValue();
      if (field.getType() == FieldDescriptor.Type.ENUM) {
        value = mapEach(value, v -> enumName(field.getEnumType(), v, where, errors));
      } else if (field.getType() == FieldDescriptor.Type.MESSAGE) {
        String itemPath = value instanceof List<?> ? where + "[]" : where;
        value = mapEach(value, v -> normalize(field.getMessageType(), v, itemPath, errors));
      }
      result.put(key, value);
    }
    return result;
  }

  private static Object mapEach(Object value, java.util.function.UnaryOperator<Object> one) {
    if (value instanceof List<?> items) {
      return items.stream().map(one).toList();
    }
    return one.apply(value);
  }

  /** The full enum value name a short spelling stands for ("earliest", "exactly-once"). */
  private static Object enumName(
      EnumDescriptor type, Object value, String path, List<String> errors) {
    if (!(value instanceof String text)) {
      return value;
    }
    String wanted = text.strip().toUpperCase(java.util.Locale.ROOT).replace('-', '_');
    for (EnumValueDescriptor candidate : type.getValues()) {
      String name = candidate.getName();
      if (name.equals(wanted) || name.endsWith("_" + wanted)) {
        return name;
      }
    }
    String unspecified =
        type.getValues().stream()
            .map(EnumValueDescriptor::getName)
            .filter(name -> name.endsWith("_UNSPECIFIED"))
            .findFirst()
            .orElse("");
    String prefix = unspecified.replaceFirst("UNSPECIFIED$", "");
    String choices =
        type.getValues().stream()
            .map(EnumValueDescriptor::getName)
            .filter(name -> !name.endsWith("_UNSPECIFIED"))
            .map(name -> name.substring(prefix.length()).toLowerCase(java.util.Locale.ROOT))
            .collect(Collectors.joining(", "));
    errors.add(path + ": '" + text + "' is not one of: " + choices);
    return value;
  }
}
