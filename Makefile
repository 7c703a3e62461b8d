# Lockgate: `make demo` shows it, `make test` proves it. `make help` lists every target.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV     := .venv
PY       := $(VENV)/bin/python
PROTO_SRC := $(wildcard protos/lockgate/v1/*.proto)
STAMP    := $(VENV)/.lockgate-install-stamp
# Prometheus 3.16.0 (its Go module is tagged v0.316.0), built from the Go module proxy.
PROMETHEUS_MODULE  := github.com/prometheus/prometheus/cmd/prometheus@v0.316.0

.PHONY: help install protos lint test test-unit test-integration test-e2e test-clients demo certs cluster-up cluster-down cluster-status bench prometheus clean

help: ## List every target with what it does
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  make %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: ## Set up .venv, the Kafka broker jars (Maven Central), PostgreSQL's binaries and the manifests' checkers; idempotent
	@bash deploy/scripts/install.sh

protos: install ## Regenerate the Python stubs (+ .pyi) from protos/lockgate/v1/*.proto
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -I protos \
	  --python_out=clients/python --grpc_python_out=clients/python \
	  --mypy_out=clients/python --mypy_grpc_out=clients/python $(PROTO_SRC)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash deploy/scripts/clients.sh generate

lint: install ## buf lint (+ buf breaking against main), ruff, mypy --strict, the code's shape, the Dockerfile, compose.yaml and Helm chart
	@bash deploy/scripts/lint.sh

test: install lint ## install, lint, then the unit and integration tiers and the Go, Java, TypeScript clients (the e2e tier: make test-e2e; CI runs both)
	bash deploy/scripts/pytest.sh "unit or integration"
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash deploy/scripts/clients.sh test

test-clients: install ## Only the Go, Java and TypeScript clients' own tests, against real services
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash deploy/scripts/clients.sh test

test-unit: install ## Only the unit tier (tests/unit): fast, no process, no socket
	bash deploy/scripts/pytest.sh unit

test-integration: install ## Only the integration tier: real Kafka, PostgreSQL, Spark, single services
	bash deploy/scripts/pytest.sh integration

test-e2e: install ## The end-to-end tier (tests/integration/e2e): the whole cluster under faults, the slow one (not in make test)
	bash deploy/scripts/pytest.sh e2e

demo: install ## Bring the local cluster up and run the demo against it
	@bash deploy/scripts/demo.sh

certs: ## Make the local CA, certificates and tokens under LOCKGATE_HOME/tls (.lockgate/tls), missing ones only
	$(PY) -m lockgate.localcluster.certs --executor e1 --executor e2

cluster-up: install ## Start the local cluster with TLS + auth (LOCKGATE_INSECURE=1: plaintext; LOCKGATE_DB=postgres: on PostgreSQL)
	$(PY) -m lockgate.localcluster.cluster up

cluster-status: ## One line per local-cluster process: name, pid, address, up/down
	@$(PY) -m lockgate.localcluster.cluster status

cluster-down: ## Stop exactly the local-cluster processes started by cluster-up (harmless twice)
	@$(PY) -m lockgate.localcluster.cluster down

bench: install ## Run the benchmarks in bench/ (figures printed, not pass/fail)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

prometheus: ## Opt-in, slow (~7 min on 2 cores): build Prometheus with `go install` into .lockgate/bin
	mkdir -p .lockgate/bin
	GOBIN=$(CURDIR)/.lockgate/bin GOFLAGS=-buildvcs=false nice -n 10 go install $(PROMETHEUS_MODULE)
	@.lockgate/bin/prometheus --version | head -1
	@echo "start it with the cluster: LOCKGATE_PROMETHEUS=1 make cluster-up"

clean: ## Stop the local cluster and remove build outputs and its data (.lockgate/, caches)
	-@[ -x $(PY) ] && $(PY) -m lockgate.localcluster.cluster down || true
	rm -rf .lockgate .pytest_cache .mypy_cache .ruff_cache .hypothesis spark-warehouse metastore_db derby.log
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +
