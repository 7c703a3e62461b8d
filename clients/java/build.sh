#!/usr/bin/env bash
# clients/java: the verbs of deploy/scripts/clients.sh for the Java client (a Maven project).
#   install   resolve every dependency and plugin from Maven Central (protoc and
#             protoc-gen-grpc-java included) and compile once; quick when already done
#   generate  regenerate the stubs from protos/lockgate/v1 and compile them
#   check     build from today's protos in a clean target/, compile the client, its example and
#             its tests against them, and check every RPC has its client method (no network)
#   test      mvn test: the integration tests against `python -m lockgate.localcluster.testbed`
# The stubs are generated at build time into target/generated-sources (never committed): see
# the pom for why. Maven runs niced, single-threaded and with a small heap (shared machine).
set -euo pipefail
cd "$(dirname "$0")"
verb=${1:?usage: clients/java/build.sh install|generate|check|test}
export MAVEN_OPTS="${MAVEN_OPTS:--Xmx384m}"
mvn=(nice mvn -B -T1)

case "$verb" in
  install)
    "${mvn[@]}" -q dependency:go-offline
    # go-offline does not fetch what plugins resolve at run time (protoc, protoc-gen-grpc-java,
    # Surefire's JUnit provider): one compile and one run of a test without network do.
    "${mvn[@]}" -q test-compile
    "${mvn[@]}" -q surefire:test -Dtest=ClientSurfaceTest
    ;;
  generate)
    "${mvn[@]}" -q generate-sources
    ;;
  check)
    if ! "${mvn[@]}" -q clean test-compile; then
      echo "clients/java: the Java client does not compile against today's protos/lockgate/v1" \
        "(its stubs are generated from them at build time): update clients/java/src to the" \
        "changed contracts, then run \`make protos\` and \`make test-clients\`." >&2
      exit 1
    fi
    if ! "${mvn[@]}" -q surefire:test -Dtest=ClientSurfaceTest; then
      echo "clients/java: an RPC of protos/lockgate/v1 has no method on its Java client" \
        "(CoordinatorClient, SchemaRegistryClient, ExecutorClient): add it, then run" \
        "\`make protos\` and \`make test-clients\`." >&2
      exit 1
    fi
    ;;
  test)
    "${mvn[@]}" test
    ;;
  *)
    echo "clients/java/build.sh: unknown verb $verb (install, generate, check, test)" >&2
    exit 2
    ;;
esac
