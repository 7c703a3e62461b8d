package dev.lockgate.client.testbed;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonParseException;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

/**
 * The schema registry's Confluent-compatible REST API (java.net.http): the other path through which
 * the tests check what the Java client did over gRPC.
 */
public final class RegistryRest {
  /** HTTP/1.1: no h2c upgrade attempt, which the registry's small server does not speak. */
  private static final HttpClient HTTP =
      HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

  private final String baseUrl;

  /** The REST API of the testbed's registry. */
  public RegistryRest(Testbed testbed) {
    this.baseUrl = testbed.registryHttp();
  }

  /** One answer: the HTTP status and the body. */
  public record Answer(int status, String body) {
    /** The body as JSON. */
    public JsonElement json() {
      try {
        return new Gson().fromJson(body, JsonElement.class);
      } catch (JsonParseException e) {
        throw new AssertionError("not JSON (HTTP " + status + "): " + body, e);
      }
    }
  }

  /** {@code method path} with an optional JSON body. */
  public Answer call(String method, String path, String jsonBody) {
    HttpRequest request =
        HttpRequest.newBuilder(URI.create(baseUrl + path))
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .method(
                method,
                jsonBody == null
                    ? HttpRequest.BodyPublishers.noBody()
                    : HttpRequest.BodyPublishers.ofString(jsonBody))
            .build();
    try {
      HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
      return new Answer(response.statusCode(), response.body());
    } catch (IOException e) {
      throw new AssertionError(method + " " + path + " failed: " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted", e);
    }
  }

  /** The JSON of a GET that must answer 200. */
  public JsonElement get(String path) {
    Answer answer = call("GET", path, null);
    if (answer.status() != 200) {
      throw new AssertionError(
          "GET " + path + " answered " + answer.status() + ": " + answer.body());
    }
    return answer.json();
  }
}
