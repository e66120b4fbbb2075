# nodeconfig — every step a newcomer or CI needs. Tools and the API server
# binaries are built from the Go module proxy into ./bin (git-ignored, cached).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

BIN       := $(CURDIR)/bin
CACHE     := $(CURDIR)/.cache
export PATH := $(BIN):$(PATH)

# The real control plane for integration tests and 'make run'. Keep in step
# with hack/testbin/go.mod (its require and replace lines).
KUBE_VERSION := v1.36.3
KUBE_MINOR   := $(word 2,$(subst ., ,$(KUBE_VERSION)))
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean

# The tools of tools/go.mod, then the typed client's generators: those of
# the k8s.io/code-generator that matches the services' client-go, pinned in
# a module of their own (tools/codegen/go.mod), as controller-tools in
# tools/go.mod needs a newer one.
GOTOOLS  := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/grpcurl $(BIN)/controller-gen
CODEGEN  := $(BIN)/client-gen $(BIN)/lister-gen $(BIN)/informer-gen
TOOLS    := $(GOTOOLS) $(CODEGEN)
TESTBIN  := $(BIN)/kube-apiserver $(BIN)/etcd
NODEBIN  := $(BIN)/kubelet $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl
SERVICES := checkpointd statusd reconciler
# The kubelet validator the reconciler runs as a child process, installed
# next to it (in ./bin, and in its image).
KUBELET_CHECK := nodeconfig.io/services/configcheck/cmd/nodeconfig-kubelet-check
# The kubelet's host-side start guard, shipped beside checkpointd.
GUARD := nodeconfig.io/services/checkpointd/cmd/nodeconfig-guard
PACKAGES := nodeconfig.io/...

# Every test package's integration tests share one API server per package.
TEST_FLAGS ?= -count=1 -timeout 30m
NODES ?= 3
FUZZTIME ?= 30s
BENCHTIME ?= 1s
FLEET_NODES ?= 1000
# How many of the fleet's nodes the rollout selects (0: all of them).
FLEET_SELECT ?= 0
# FLEET_FAILOVER=1: make fleet-bench also kills the leader mid-change and
# times its standby (the 5,000-node fail-over row).
FLEET_FAILOVER ?= 0

IMAGE_REPO ?= ghcr.io/nodeconfig
IMAGE_TAG  ?= v0.1.0
# What each service's nodeconfig_build_info and the plugin's version say it is.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
VERSION_LDFLAGS := -X nodeconfig.io/services/servekit.Version=$(VERSION) -X nodeconfig.io/services/kubectl-nodeconfig/internal/version.Version=$(VERSION)
# The real node's pod sandbox image, built here: the test machine reaches no registry.
PAUSE_IMAGE := nodeconfig.local/pause:test

.PHONY: help tools testbin nodebin node-packages promtool generate build lint test test-unit bench e2e-bench realnode-bench fleet-bench store-bench bench-table fleet fleet-plugin run cluster clean fuzz images build-race

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

tools: $(TOOLS) ## build buf, protoc plugins, grpcurl, controller-gen and the typed client's generators into ./bin

$(GOTOOLS) &: tools/go.mod tools/go.sum
	GOWORK=off go -C tools build -o $(BIN)/ tool
	@touch $(GOTOOLS)

$(CODEGEN) &: tools/codegen/go.mod tools/codegen/go.sum
	GOWORK=off go -C tools/codegen build -o $(BIN)/ tool
	@touch $(CODEGEN)

testbin: $(TESTBIN) ## build kube-apiserver and etcd into ./bin (about 5 minutes cold)

$(TESTBIN) &: hack/testbin/go.mod hack/testbin/go.sum
	@echo "building kube-apiserver $(KUBE_VERSION) and etcd from the Go module proxy (about 5 minutes the first time)..."
	cd hack/testbin && GOWORK=off CGO_ENABLED=0 go build -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	cd hack/testbin && GOWORK=off CGO_ENABLED=0 go build -ldflags "-s -w" -o $(BIN)/etcd go.etcd.io/etcd/server/v3
	@touch $(TESTBIN)

nodebin: $(NODEBIN) ## build the real node's kubelet, controller-manager, scheduler and kubectl into ./bin

$(NODEBIN) &: hack/testbin/go.mod hack/testbin/go.sum
	@echo "building kubelet, kube-controller-manager, kube-scheduler and kubectl $(KUBE_VERSION) (about 4 minutes the first time)..."
	@for c in kubelet kube-controller-manager kube-scheduler kubectl; do \
		(cd hack/testbin && GOWORK=off CGO_ENABLED=0 go build -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/$$c k8s.io/kubernetes/cmd/$$c) || exit 1; \
	done
	@touch $(NODEBIN)

node-packages: ## containerd, runc, the CNI plugins and iptables from Debian, when missing (needs root)
	@hack/node-packages.sh

promtool: ## promtool into ./bin from Debian's prometheus package, when missing (the alert rules' unit tests, test/rules)
	@hack/promtool.sh $(BIN) $(CACHE)

generate: $(TOOLS) ## regenerate the Go code of proto/, and from the types of services/api/v1alpha1 the CRD in deploy/crd, their deep copies and the typed client in services/api/client
	buf generate
	hack/gen-crd.sh deploy/crd
	controller-gen object paths=./services/api/v1alpha1
	hack/gen-client.sh services/api/client

build: ## build the three services, the reconciler's kubelet validator and the kubectl plugin (kubectl-nodeconfig) into ./bin
	go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ $(addprefix nodeconfig.io/services/,$(SERVICES) kubectl-nodeconfig) $(KUBELET_CHECK) $(GUARD)

$(BIN)/ocibuild: tools/go.mod tools/go.sum tools/cmd/ocibuild/main.go
	GOWORK=off go -C tools build -o $(BIN)/ocibuild ./cmd/ocibuild

images: $(BIN)/ocibuild ## OCI image tarballs of the services in ./bin/images (docker load -i ...)
	@mkdir -p $(BIN)/linux-amd64 $(BIN)/images
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN)/linux-amd64/ $(addprefix nodeconfig.io/services/,$(SERVICES)) $(KUBELET_CHECK) $(GUARD)
	@# The reconciler finds its kubelet validator next to itself (/nodeconfig-kubelet-check),
	@# checkpointd the start guard it installs on the host (/nodeconfig-guard).
	@for s in $(SERVICES); do \
		case $$s in reconciler) add="--add $(BIN)/linux-amd64/$(notdir $(KUBELET_CHECK))";; checkpointd) add="--add $(BIN)/linux-amd64/$(notdir $(GUARD))";; *) add="";; esac; \
		$(BIN)/ocibuild --binary $(BIN)/linux-amd64/$$s $$add --tag $(IMAGE_REPO)/$$s:$(IMAGE_TAG) --out $(BIN)/images/$$s.tar && \
		echo "$(BIN)/images/$$s.tar  $(IMAGE_REPO)/$$s:$(IMAGE_TAG)"; \
	done
	@CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w" -o $(BIN)/linux-amd64/pause nodeconfig.io/test/cmd/pause
	@$(BIN)/ocibuild --binary $(BIN)/linux-amd64/pause --tag $(PAUSE_IMAGE) --user 65535:65535 --out $(BIN)/images/pause.tar

# A release, make release VERSION=vX.Y.Z, into DIST: each service's OCI
# archive (an image index of RELEASE_PLATFORMS, named
# RELEASE_REGISTRY/SERVICE:VERSION), install.yaml naming those images by
# digest, the Helm chart's package, the kubectl plugin's archives for
# PLUGIN_PLATFORMS and its krew manifest, SHA256SUMS; then dist verify
# checks all of it. Everything is built with CGO_ENABLED=0 into
# RELEASE_BIN/OS-ARCH.
DIST              ?= $(CURDIR)/dist
RELEASE_REGISTRY  ?= $(IMAGE_REPO)
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
PLUGIN_PLATFORMS  ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_URL       ?= https://github.com/nodeconfig/nodeconfig/releases/download/$(VERSION)
RELEASE_BIN       ?= $(BIN)/release

.PHONY: chart release

$(BIN)/dist $(BIN)/chartgen &: tools/release/go.mod tools/release/go.sum $(shell find tools/release -name '*.go' -not -name '*_test.go')
	GOWORK=off go -C tools/release build -o $(BIN)/ ./cmd/dist ./cmd/chartgen

chart: $(BIN)/chartgen ## the Helm chart deploy/helm/nodeconfig generated again from deploy/ (after any edit of deploy/)
	$(BIN)/chartgen -deploy deploy -out deploy/helm/nodeconfig

release: $(BIN)/ocibuild $(BIN)/dist ## a release into ./dist: make release VERSION=vX.Y.Z (multi-arch OCI archives, install.yaml by digest, Helm chart, kubectl plugin, SHA256SUMS)
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$$ ]] || { echo "make release VERSION=vX.Y.Z (not '$(VERSION)')" >&2; exit 1; }
	rm -rf $(DIST) && mkdir -p $(DIST)
	@for p in $(RELEASE_PLATFORMS); do \
		echo "building the services for $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(RELEASE_BIN)/$${p/\//-}/ \
			$(addprefix nodeconfig.io/services/,$(SERVICES)) $(KUBELET_CHECK) $(GUARD) || exit 1; \
	done
	@for p in $(PLUGIN_PLATFORMS); do \
		echo "building kubectl-nodeconfig for $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(RELEASE_BIN)/$${p/\//-}/ \
			nodeconfig.io/services/kubectl-nodeconfig || exit 1; \
	done
	@# As make images: the reconciler's kubelet validator beside it, checkpointd's start guard beside it.
	@for s in $(SERVICES); do \
		args=(); for p in $(RELEASE_PLATFORMS); do d=$(RELEASE_BIN)/$${p/\//-}; args+=(--binary $$p=$$d/$$s); \
			case $$s in reconciler) args+=(--add $$p=$$d/$(notdir $(KUBELET_CHECK)));; checkpointd) args+=(--add $$p=$$d/$(notdir $(GUARD)));; esac; \
		done; \
		digest=$$($(BIN)/ocibuild --format oci "$${args[@]}" --tag $(RELEASE_REGISTRY)/$$s:$(VERSION) --out $(DIST)/$$s-$(VERSION).oci.tar) || exit 1; \
		echo "$(DIST)/$$s-$(VERSION).oci.tar  $(RELEASE_REGISTRY)/$$s@$$digest"; \
	done
	$(BIN)/dist assemble -version $(VERSION) -registry $(RELEASE_REGISTRY) -dir $(DIST) -deploy deploy -chart deploy/helm/nodeconfig \
		-license LICENSE -url $(RELEASE_URL) $(foreach p,$(PLUGIN_PLATFORMS),-plugin $(p)=$(RELEASE_BIN)/$(subst /,-,$(p))/kubectl-nodeconfig)
	$(BIN)/dist verify -version $(VERSION) -dir $(DIST) -image-platforms '$(RELEASE_PLATFORMS)' -plugin-platforms '$(PLUGIN_PLATFORMS)'

lint: $(TOOLS) ## gofmt, go vet, buf lint/format/breaking, stale generated code (proto, deep copies, typed client) and CRD
	@out=$$(gofmt -l proto services test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(PACKAGES)
	buf lint
	buf format -d --exit-code
	@hack/check-generated.sh
	@hack/check-breaking.sh
	@hack/check-modules.sh

build-race: testbin ## the three services (and the reconciler's kubelet validator) built with the race detector into ./bin/race (with the control plane linked in), and the race pass's canary
	@mkdir -p $(BIN)/race
	@# The canary races on purpose: built in the same command, with the same flags, it shows
	@# the race pass that these binaries report races and that its log scan finds them.
	go build -race -o $(BIN)/race/ $(addprefix nodeconfig.io/services/,$(SERVICES)) $(KUBELET_CHECK) nodeconfig.io/test/cmd/racecanary
	@for b in etcd kube-apiserver; do ln -sf ../$$b $(BIN)/race/$$b; done

# The e2e tests of the race pass, listed in RACE_LIST: the reconciler's
# workers racing over one NodeConfig (pacing, halts, departures, pause),
# fail-over (and a lost Lease clearing the gauges its workers set), TLS with tokens, and central validation (the nodes of a version
# sharing one run of the kubelet validator's child process), and the checks of
# the pass itself (its binaries built with -race, its canary caught by the log
# scan). TestRacePassListsOnlyTestsOfThisPackage fails on a name of the list
# that test/e2e does not define: a renamed test fails make test instead of
# dropping out of the pass.
RACE_LIST := test/e2e/testdata/race-pass.txt
RACE_E2E  := ^($(shell paste -sd'|' $(RACE_LIST)))$$

test: lint build build-race testbin nodebin node-packages promtool images ## lint, then every unit and integration test (the alert rules' with promtool), the race pass, the real node, and one pass of each benchmark
	go test -run '^$$' -bench . -benchtime 1x nodeconfig.io/services/... nodeconfig.io/test/e2e
	go run nodeconfig.io/test/bench/fleet -nodes 20 -cold-reviews=false -fail-on-failed-sync
	go test $(TEST_FLAGS) $$(go list $(PACKAGES) | grep -v /test/realnode)
	@# The release's tools, outside go.work: OCI archives, and the Helm chart against deploy/.
	GOWORK=off go -C tools test $(TEST_FLAGS) ./cmd/ocibuild
	GOWORK=off go -C tools/release test $(TEST_FLAGS) ./...
	@# The race pass: the services' unit tests, then e2e tests driving binaries built with -race
	@# and client-go's cache mutation detector on (a race report or an altered cache object in
	@# any of their logs fails the test).
	KUBE_CACHE_MUTATION_DETECTOR=true go test -race $(TEST_FLAGS) nodeconfig.io/proto/... nodeconfig.io/services/...
	KUBE_CACHE_MUTATION_DETECTOR=true NODECONFIG_BIN=$(BIN)/race go test $(TEST_FLAGS) -run '$(RACE_E2E)' nodeconfig.io/test/e2e
	@# The real node (root, containerd, a kubelet) runs alone: it is the heaviest package.
	go test $(TEST_FLAGS) nodeconfig.io/test/realnode/...

# What needs neither root nor a cluster, in a few minutes: the services' unit
# tests, the table of figures and its gates, the test framework's own.
UNIT_PACKAGES := nodeconfig.io/proto/... nodeconfig.io/services/... nodeconfig.io/test/bench/... nodeconfig.io/test/framework/...

test-unit: ## the tests that need neither root nor a cluster (unit tests of every service, the figures' gates), in a few minutes
	go test $(TEST_FLAGS) $(UNIT_PACKAGES)

# The raw output of the last make bench (and of make fleet-bench after it),
# committed: the table of docs/performance.md is rendered from it, and make
# test fails when the two differ. A line "# run: ..." names each run.
BENCH_OUT := docs/bench/latest.txt
BENCH_RUN  = echo "\# run: $(1) on $$(date -u '+%Y-%m-%d %H:%M UTC') at $$(git describe --always --dirty)"

bench: build testbin nodebin node-packages images ## every performance figure into docs/bench/latest.txt, then the table of docs/performance.md from it (about 12 min)
	@mkdir -p $(dir $(BENCH_OUT))
	@$(call BENCH_RUN,make bench) > $(BENCH_OUT)
	go test -run '^$$' -bench . -skip PutCheckpointConcurrent -benchtime $(BENCHTIME) nodeconfig.io/services/... | tee -a $(BENCH_OUT)
	@# Its target holds in each of 5 consecutive runs, all of which the table judges.
	go test -run '^$$' -bench PutCheckpointConcurrent -benchtime 3x -count 5 nodeconfig.io/services/checkpointd/internal/grpcapi | tee -a $(BENCH_OUT)
	$(E2E_BENCH)
	go run nodeconfig.io/test/bench/fleet -nodes 1000 | tee -a $(BENCH_OUT)
	@# The same change as after a quiet hour: every node's token due for renewal, every review expired.
	go run nodeconfig.io/test/bench/fleet -nodes 1000 -tokens-due 60s | tee -a $(BENCH_OUT)
	@# The same fleet around authentication (unix sockets): what TLS and the per-node tokens cost.
	go run nodeconfig.io/test/bench/fleet -nodes 1000 -auth=false | tee -a $(BENCH_OUT)
	@# The same fleet with Nodes of a real kubelet's size: what every status patch rewrites in etcd.
	go run nodeconfig.io/test/bench/fleet -nodes 1000 -kubelet-like-nodes | tee -a $(BENCH_OUT)
	$(REALNODE_BENCH)
	@echo; $(MAKE) --no-print-directory bench-table

# The end-to-end figures of make bench (a local control plane, simulated nodes).
define E2E_BENCH
go test -run '^$$' -bench AssignmentLatency -benchtime 200x nodeconfig.io/test/e2e | tee -a $(BENCH_OUT)
	go test -run '^$$' -bench 'WritesPerNode|SteadyState' -benchtime 3x nodeconfig.io/test/e2e | tee -a $(BENCH_OUT)
endef

e2e-bench: build testbin ## the end-to-end figures of make bench alone (latency, writes), appended to docs/bench/latest.txt, then the table (about 3 min)
	@mkdir -p $(dir $(BENCH_OUT))
	@$(call BENCH_RUN,make e2e-bench) >> $(BENCH_OUT)
	$(E2E_BENCH)
	@echo; $(MAKE) --no-print-directory bench-table

# The real kubelet's figures (root, containerd, a kubelet), the last part of make bench.
define REALNODE_BENCH
go test -short -run '^$$' -bench KubeletRunsNewConfig -benchtime 20x nodeconfig.io/test/realnode | tee -a $(BENCH_OUT)
	go test -short -run '^$$' -bench BadConfigToHealthyLastKnownGood -benchtime 10x nodeconfig.io/test/realnode | tee -a $(BENCH_OUT)
endef

realnode-bench: build testbin nodebin node-packages images ## the real kubelet's figures of make bench alone, appended to docs/bench/latest.txt, then the table (about 5 min)
	@mkdir -p $(dir $(BENCH_OUT))
	@$(call BENCH_RUN,make realnode-bench) >> $(BENCH_OUT)
	$(REALNODE_BENCH)
	@echo; $(MAKE) --no-print-directory bench-table

fleet-bench: build testbin nodebin ## one fleet run of FLEET_NODES nodes (a rollout to FLEET_SELECT of them, 0: all) appended to docs/bench/latest.txt (the 5,000-node rows: FLEET_NODES=5000, its fail-over row: FLEET_FAILOVER=1 too), then the table
	@mkdir -p $(dir $(BENCH_OUT))
	@$(call BENCH_RUN,make fleet-bench FLEET_NODES=$(FLEET_NODES)$(if $(filter-out 0,$(FLEET_SELECT)), FLEET_SELECT=$(FLEET_SELECT))$(if $(filter-out 0,$(FLEET_FAILOVER)), FLEET_FAILOVER=1)) >> $(BENCH_OUT)
	go run nodeconfig.io/test/bench/fleet -nodes $(FLEET_NODES) -select $(FLEET_SELECT)$(if $(filter-out 0,$(FLEET_FAILOVER)), -failover) | tee -a $(BENCH_OUT)
	@echo; $(MAKE) --no-print-directory bench-table

# The 32-writer speedup swings with this VM's disk: five consecutive runs
# are kept apart, each of which should reach 3 x.
STORE_BENCH_OUT := docs/bench/store-speedup.txt

store-bench: ## five consecutive runs of the 32-writer put benchmark into docs/bench/store-speedup.txt
	@mkdir -p $(dir $(STORE_BENCH_OUT))
	@$(call BENCH_RUN,make store-bench) > $(STORE_BENCH_OUT)
	go test -run '^$$' -bench PutCheckpointConcurrent -benchtime 3x -count 5 nodeconfig.io/services/checkpointd/internal/grpcapi | tee -a $(STORE_BENCH_OUT)

bench-table: ## the table of docs/performance.md rendered again from docs/bench/latest.txt (fails on a missed target)
	go run nodeconfig.io/test/bench/benchtable -write docs/performance.md $(BENCH_OUT)

fleet: build testbin nodebin ## the fleet benchmark alone, nothing saved: FLEET_NODES simulated nodes (default 1000)
	go run nodeconfig.io/test/bench/fleet -nodes $(FLEET_NODES)

fleet-plugin: build testbin nodebin ## kubectl nodeconfig against a settled fleet of FLEET_NODES (status fits a screen, -o yaml round-trips, their times), the change's other measurements skipped
	go run nodeconfig.io/test/bench/fleet -nodes $(FLEET_NODES) -plugin -ceiling 0 -idle 0 -policy-cost=false -cold-reviews=false

fuzz: ## fuzz each target for FUZZTIME (default 30s)
	@hack/fuzz.sh $(FUZZTIME)

run: build testbin $(TOOLS) ## the whole system locally: control plane, NODES simulated nodes, reconciler
	@go build -o $(BIN)/localrun nodeconfig.io/test/cmd/localrun
	@# Not go run, which exits 1 after a Ctrl-C (see cluster).
	$(BIN)/localrun --nodes $(NODES) --state $(CURDIR)/.run --bin $(BIN)

cluster: build testbin nodebin node-packages images ## a real one-node cluster (containerd + kubelet, needs root) with the install applied
	@go build -o $(BIN)/realcluster nodeconfig.io/test/cmd/realcluster
	@# The command itself, not go run (which exits 1 after a Ctrl-C): it exits 0 once it has
	@# cleaned up, and make with it.
	$(BIN)/realcluster

clean: ## remove built binaries, caches and local run state
	rm -rf $(BIN) $(CACHE) .run
