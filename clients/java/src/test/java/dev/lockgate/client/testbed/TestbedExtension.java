package dev.lockgate.client.testbed;

import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * Gives tests the one {@link Testbed} of the test run: started by the first class that asks, shared
 * by every later one, stopped when the run ends (it lives in the root context's store). Use
 * {@code @ExtendWith(TestbedExtension.class)} and take a {@code Testbed} parameter, e.g. in a
 * {@code @BeforeAll} method.
 */
public final class TestbedExtension implements ParameterResolver {
  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
    return parameter.getParameter().getType() == Testbed.class;
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
    return context
        .getRoot()
        .getStore(ExtensionContext.Namespace.create(TestbedExtension.class))
        .getOrComputeIfAbsent("testbed", key -> new Running(), Running.class)
        .testbed;
  }

  /** The store closes it at the end of the run. */
  private static final class Running
      implements AutoCloseable, ExtensionContext.Store.CloseableResource {
    final Testbed testbed;

    Running() {
      try {
        testbed = Testbed.start();
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }

    @Override
    public void close() throws Exception {
      testbed.close();
    }
  }
}
