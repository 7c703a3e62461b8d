package dev.lockgate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.lockgate.v1.CoordinatorServiceGrpc;
import dev.lockgate.v1.ExecutorServiceGrpc;
import dev.lockgate.v1.SchemaRegistryServiceGrpc;
import io.grpc.MethodDescriptor;
import io.grpc.ServiceDescriptor;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Every RPC of every service in protos/lockgate/v1 has its method on the matching client (an RPC
 * added to the protos and not to the client fails here, and so in `make lint`). No network.
 */
class ClientSurfaceTest {
  private static List<String> missing(ServiceDescriptor service, Class<?> client) {
    List<String> absent = new ArrayList<>();
    for (MethodDescriptor<?, ?> rpc : service.getMethods()) {
      String name = rpc.getBareMethodName();
      String javaName = Character.toLowerCase(name.charAt(0)) + name.substring(1);
      boolean found = false;
      for (Method method : client.getMethods()) {
        found |=
            method.getName().equals(javaName)
                && Modifier.isPublic(method.getModifiers())
                && method.getParameterCount() == 1;
      }
      if (!found) {
        absent.add(service.getName() + "/" + name);
      }
    }
    return absent;
  }

  @Test
  void everyRpcHasAClientMethod() {
    List<String> absent = new ArrayList<>();
    absent.addAll(missing(CoordinatorServiceGrpc.getServiceDescriptor(), CoordinatorClient.class));
    absent.addAll(
        missing(SchemaRegistryServiceGrpc.getServiceDescriptor(), SchemaRegistryClient.class));
    absent.addAll(missing(ExecutorServiceGrpc.getServiceDescriptor(), ExecutorClient.class));
    assertEquals(
        List.of(),
        absent,
        "RPCs without a method on their client (clients/java/src/main/java/dev/lockgate/client)");
  }
}
