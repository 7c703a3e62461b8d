package dev.lockgate.client;

import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Message;
import java.util.UUID;

/**
 * The {@code request_id} of mutating calls: every request message that has a string field {@code
 * request_id} left empty gets a fresh UUID, once per logical call, before the first attempt, so
 * every retry of that call carries the same id and the service applies it once.
 */
final class RequestIds {
  static final String FIELD = "request_id";

  private RequestIds() {}

  /** {@code request} with a new UUID as its request_id if it has that field and it is empty. */
  @SuppressWarnings("unchecked")
  static <M extends Message> M filled(M request) {
    FieldDescriptor field = request.getDescriptorForType().findFieldByName(FIELD);
    if (field == null
        || field.getJavaType() != FieldDescriptor.JavaType.STRING
        || field.isRepeated()
        || !((String) request.getField(field)).isEmpty()) {
      return request;
    }
    return (M) request.toBuilder().setField(field, UUID.randomUUID().toString()).build();
  }
}
