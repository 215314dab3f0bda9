# Portal build and test harness. GNU make; recipes are POSIX sh.
# `make help` lists the targets.

SHELL := /bin/sh
.DEFAULT_GOAL := help
.SUFFIXES:

GO       ?= go
FUZZTIME ?= 5s
# Overall limit for `go test` in test-go and bench (the control-plane tests are slow).
TEST_TIMEOUT ?= 30m

BIN     := bin
K8S_BIN := $(BIN)/k8s

# Tests (envtest via internal/devcluster) find kube-apiserver, etcd and kubectl here.
# Override on the command line (make test-go KUBEBUILDER_ASSETS=...) to use another set.
KUBEBUILDER_ASSETS := $(abspath $(K8S_BIN))
export KUBEBUILDER_ASSETS

# The test tools are linked without the symbol table and DWARF (-s -w): they are
# run, never debugged, and linking the big ones (kube-apiserver, istioctl) takes
# a third less time and disk. Go's own tracebacks still work.
TOOL_LDFLAGS := -s -w

# A change of pins in hack/tools rebuilds the binaries built from that module.
K8S_TOOLS_DEPS  := hack/tools/go.mod hack/tools/go.sum
ETCD_TOOLS_DEPS := hack/tools/etcd/go.mod hack/tools/etcd/go.sum hack/tools/etcd/main.go

# Files compared before and after `make generate` by verify-generated.
GENERATED_DIRS := api deploy/crds

.PHONY: help tools generate verify-generated fmt-check vet staticcheck lint test-go test-go-rest test-race fuzz fuzz-build test-go-race-fuzz test image-binary-cache \
	bench bench-admission bench-audit bench-runtime bench-eval-kyverno bench-kyverno-parity build run run-node eval-demo clean clean-tools

help: ## List the targets
	@echo 'Targets:'
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

## ---- tools -----------------------------------------------------------------

# apt_install installs those of the Debian packages $(2) that are missing
# (apt-get, through sudo when not root); $(1) names the target in its message.
define apt_install
missing=; for p in $(2); do \
	dpkg-query -W -f '$${Status}' "$$p" 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
done; \
if [ -n "$$missing" ]; then \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	echo "$(1): installing$$missing"; \
	$$sudo apt-get update && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
fi
endef

# The node of the tests that need pods (internal/devcluster/node): built from the same pin as
# kube-apiserver. Defined before `tools`, whose prerequisites make expands as it reads them.
NODE_BINS := $(K8S_BIN)/kubelet $(K8S_BIN)/kube-controller-manager $(K8S_BIN)/kube-scheduler $(K8S_BIN)/kube-proxy

tools: $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(K8S_BIN)/etcd $(NODE_BINS) tools-pkgs $(BIN)/alertmanager $(BIN)/helm $(BIN)/versitygw $(BIN)/istioctl ## Build bin/k8s/{kube-apiserver,kubectl,etcd,kubelet,kube-controller-manager,kube-scheduler,kube-proxy}, bin/alertmanager, bin/helm, bin/versitygw and bin/istioctl when missing or when hack/tools pins change; install nginx and the node's packages (apt-get) when missing
	@:

# Debian packages of the test node: the container runtime, the CNI plugins
# (/usr/lib/cni) and what kube-proxy needs.
NODE_PKGS := containerd runc containernetworking-plugins iptables conntrack

.PHONY: node-tools tools-pkgs
node-tools: ## Install containerd, runc, containernetworking-plugins, iptables and conntrack (apt-get) when missing
	@$(call apt_install,node-tools,$(NODE_PKGS))

# `tools` installs the node's and the bundle tests' packages in one apt-get run: under
# make -j two runs at once would fail on dpkg's lock.
tools-pkgs:
	@$(call apt_install,tools,$(NODE_PKGS) $(BUNDLE_PKGS))

# Under make -j the other tools, each its own module, build beside these, but these
# build one after another (each waits for the one before it, order-only): they share
# most of their packages, which two go commands at once would each compile.
$(K8S_BIN)/kubectl: | $(K8S_BIN)/kube-apiserver
$(K8S_BIN)/kubelet: | $(K8S_BIN)/kubectl
$(K8S_BIN)/kube-controller-manager: | $(K8S_BIN)/kubelet
$(K8S_BIN)/kube-scheduler: | $(K8S_BIN)/kube-controller-manager
$(K8S_BIN)/kube-proxy: | $(K8S_BIN)/kube-scheduler

# The version of k8s.io/kubernetes in hack/tools/go.mod is stamped in as the release
# build does, so /version and `kubectl version` report it instead of v0.0.0-master.
# go build leaves an up-to-date binary untouched, so touch it: otherwise a go.mod
# edit that does not change the binary would rebuild on every run.

$(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(NODE_BINS): $(K8S_TOOLS_DEPS)
	@echo 'tools: building $@ (several minutes when the build cache is cold)'
	@mkdir -p $(@D)
	@cd hack/tools && \
	v=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes) || exit 1; \
	major=$${v#v}; major=$${major%%.*}; minor=$${v#v*.}; minor=$${minor%%.*}; \
	ldflags='$(TOOL_LDFLAGS)'; for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do \
		ldflags="$$ldflags -X $$p.gitVersion=$$v -X $$p.gitMajor=$$major -X $$p.gitMinor=$$minor -X $$p.gitTreeState=clean"; \
	done; \
	$(GO) build -ldflags "$$ldflags" -o '$(CURDIR)/$@' k8s.io/kubernetes/cmd/$(@F)
	@touch $@

$(K8S_BIN)/etcd: $(ETCD_TOOLS_DEPS)
	@echo 'tools: building $@'
	@mkdir -p $(@D)
	@cd hack/tools/etcd && $(GO) build -ldflags '$(TOOL_LDFLAGS)' -o '$(CURDIR)/$@' .
	@touch $@

AM_TOOLS_DEPS := hack/tools/alertmanager/go.mod hack/tools/alertmanager/go.sum

# The real Alertmanager the audit tests send alerts to and read back.
$(BIN)/alertmanager: $(AM_TOOLS_DEPS)
	@echo 'tools: building $@'
	@mkdir -p $(@D)
	@cd hack/tools/alertmanager && $(GO) build -ldflags '$(TOOL_LDFLAGS)' -o '$(CURDIR)/$@' github.com/prometheus/alertmanager/cmd/alertmanager
	@touch $@

HELM_TOOLS_DEPS := hack/tools/helm/go.mod hack/tools/helm/go.sum

# helm for the chart checks (helm-check, the golden tests in deploy/helm). The
# module's version is stamped in as helm's release build does.
$(BIN)/helm: $(HELM_TOOLS_DEPS)
	@echo 'tools: building $@'
	@mkdir -p $(@D)
	@cd hack/tools/helm && v=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v4) || exit 1; \
	$(GO) build -ldflags "$(TOOL_LDFLAGS) -X helm.sh/helm/v4/internal/version.version=$$v" -o '$(CURDIR)/$@' helm.sh/helm/v4/cmd/helm
	@touch $@

VERSITYGW_TOOLS_DEPS := hack/tools/versitygw/go.mod hack/tools/versitygw/go.sum

# versitygw, the S3-compatible storage the WAF bundle tests (internal/waf/bundle)
# fetch bundles from.
$(BIN)/versitygw: $(VERSITYGW_TOOLS_DEPS)
	@echo 'tools: building $@'
	@mkdir -p $(@D)
	@cd hack/tools/versitygw && $(GO) build -ldflags '$(TOOL_LDFLAGS)' -o '$(CURDIR)/$@' github.com/versity/versitygw/cmd/versitygw
	@touch $@

# Debian's nginx (the core package only) terminates TLS and mTLS
# (ssl_verify_client on) in front of versitygw in the WAF bundle tests:
# versitygw has no client-certificate checks of its own.
BUNDLE_PKGS := nginx

.PHONY: bundle-tools
bundle-tools: ## Install nginx (apt-get) when missing, for the WAF bundle TLS/mTLS tests
	@$(call apt_install,bundle-tools,$(BUNDLE_PKGS))

ISTIOCTL_TOOLS_DEPS := hack/tools/istioctl/go.mod hack/tools/istioctl/go.sum

# istioctl for the API exposure tests (internal/apigateway): every generated
# Istio object goes through `istioctl validate` and `istioctl analyze`.
$(BIN)/istioctl: $(ISTIOCTL_TOOLS_DEPS)
	@echo 'tools: building $@ (several minutes when the build cache is cold)'
	@mkdir -p $(@D)
	@cd hack/tools/istioctl && $(GO) build -ldflags '$(TOOL_LDFLAGS)' -o '$(CURDIR)/$@' istio.io/istio/istioctl/cmd/istioctl
	@touch $@

## ---- code generation -------------------------------------------------------

generate: ## Generate deepcopy code and CRD manifests (deploy/crds) from ./api
	@if [ -d api ] && [ -n "$$(find api -type f -name '*.go' | head -n 1)" ]; then \
		$(GO) tool controller-gen object paths=./api/... && \
		$(GO) tool controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/crds; \
	else \
		echo 'generate: no Go packages under ./api, nothing to generate'; \
	fi

# Compares the content of api/ and deploy/crds before and after `make generate`. On a
# clean checkout that is the committed state, so any difference, including a generated
# file that was never added (untracked-new), is drift. Uncommitted hand edits that
# `make generate` leaves alone are not reported.
verify-generated: ## Fail when `make generate` changes files under api/ or deploy/crds
	@tmp=$$(mktemp -d) || exit 1; trap 'rm -rf "$$tmp"' EXIT; \
	snap() { for d in $(GENERATED_DIRS); do \
		[ ! -d "$$d" ] || find "$$d" -type f -exec cksum {} +; done | sort -k 3; }; \
	snap >"$$tmp/before" && \
	$(MAKE) --no-print-directory generate >/dev/null && \
	snap >"$$tmp/after" || exit 1; \
	if ! cmp -s "$$tmp/before" "$$tmp/after"; then \
		echo 'verify-generated: generated files are out of date; run `make generate` and commit:' >&2; \
		diff "$$tmp/before" "$$tmp/after" | sed -n 's/^[<>] [0-9]* [0-9]* /  /p' | sort -u >&2; \
		exit 1; \
	fi

## ---- static checks ---------------------------------------------------------

fmt-check: ## Fail when gofmt would change a Go file
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo 'fmt-check: run gofmt -w on:' >&2; echo "$$out" >&2; exit 1; fi

vet: ## go vet ./...
	@$(GO) vet ./...

staticcheck: ## staticcheck ./...
	@$(GO) tool staticcheck ./...

lint: fmt-check vet staticcheck ## gofmt, vet and staticcheck

# Not part of make test: cross-compiling every dependency for another OS
# costs minutes with a cold build cache.
check-macos: ## Cross-compile what make run builds (bin/portal, kube-apiserver, kubectl, etcd) for macOS, darwin/arm64 and amd64: that path has no Linux-only code
	@for arch in arm64 amd64; do \
		echo "check-macos: darwin/$$arch"; \
		GOOS=darwin GOARCH=$$arch $(GO) build -o /dev/null ./cmd/portal && \
		(cd hack/tools && for c in kube-apiserver kubectl; do \
			GOOS=darwin GOARCH=$$arch $(GO) build -o /dev/null k8s.io/kubernetes/cmd/$$c || exit 1; done) && \
		(cd hack/tools/etcd && GOOS=darwin GOARCH=$$arch $(GO) build -o /dev/null .) || exit 1; \
	done

## ---- tests -----------------------------------------------------------------

test-go: tools ## go test ./... against the real control plane in bin/k8s
	@$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

# The packages whose tests run again under the race detector in `make test`: those
# whose code shares state between goroutines (informer handlers, worker queues,
# webhook handlers, sinks' batches) and whose tests drive it concurrently. Left
# out: internal/audit (TestShardedReports, 3,000 pods, misses its deadlines under
# -race), internal/waf/cache (TestPutTableRefusesBeforeEncoding bounds allocations,
# and -race makes sync.Pool drop entries on purpose), and the packages whose extra
# dependencies or minutes the race run would add (manager, waf/proxy, the e2e tests).
RACE_PKGS ?= ./internal/findings/... ./internal/sink/... ./internal/clustercache/... ./internal/lookup/... \
	./internal/runtime/... ./internal/exception/... ./internal/network/... ./internal/actions \
	./internal/admission/... ./internal/rule/... ./internal/engine/...
RACE_TIMEOUT ?= 15m

test-race: tools ## go test -race on the packages that share state between goroutines (RACE_PKGS)
	@$(GO) test -race -count=1 -timeout $(RACE_TIMEOUT) $(RACE_PKGS)

# test/e2e and test/e2e/chart each build Portal's image binary (devcluster.BuildImage:
# CGO_ENABLED=0, -trimpath, the image's tags), and go test runs them at the same
# time: with a cold build cache both compiled all of it, twice over on the same cores.
# Compiled once here, before them, their builds find it in the cache.
image-binary-cache:
	@CGO_ENABLED=0 GOOS=linux $(GO) build -tags portal_nodev -trimpath -o /dev/null ./cmd/portal

# make test runs RACE_PKGS once, under -race (test-race), and every other package
# here: a second, plain run of the same tests would only add its link and test time.
test-go-rest: tools
	@race=$$($(GO) list $(RACE_PKGS)) && all=$$($(GO) list ./...) || exit 1; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$(printf '%s\n' "$$all" | grep -vxF -e "$$race")

# Once test-go-rest has compiled its test binaries, its tests spend minutes waiting on
# control planes, the node, image builds and rollouts (the end-to-end packages, last,
# alone for minutes), and the CPU is often idle. test-race and fuzz then compile about
# 950 packages with -race and 1,200 instrumented ones. So `make test` runs the three
# steps in one recipe and compiles those two sets beside test-go-rest, each in its own
# go command (they share no compiled package) at the lowest priority (nice 19): they
# take only the CPU the tests leave, and each step finds its packages in the build
# cache. test-race waits for the race build only; the fuzz binaries go on building
# beside test-race. Only a cache is filled: the builds' output goes to
# bin/prebuild-race.log and bin/prebuild-fuzz.log, and a compile error there is
# reported again by the step that needs the package. The steps stop at the first
# failure (after the builds beside them end).
test-go-race-fuzz: tools
	@mkdir -p $(BIN); \
	nice -n 19 $(GO) test -race -count=1 -exec true $(RACE_PKGS) >$(BIN)/prebuild-race.log 2>&1 & race=$$!; \
	nice -n 19 $(MAKE) --no-print-directory fuzz-build >$(BIN)/prebuild-fuzz.log 2>&1 & fuzz=$$!; \
	$(MAKE) --no-print-directory test-go-rest || { wait; exit 1; }; \
	wait $$race; \
	$(MAKE) --no-print-directory test-race || { wait; exit 1; }; \
	wait $$fuzz; \
	$(MAKE) --no-print-directory fuzz

# The instrumented test binaries of `make fuzz`, one per package. Kept between runs:
# `go test -c -o` relinks only a binary whose inputs changed.
FUZZ_BIN ?= $(BIN)/fuzz
# The packages whose Fuzz targets `make fuzz` runs (make fuzz FUZZ_PKGS=./internal/image).
FUZZ_PKGS ?= ./...

# Every Fuzz target in the module runs for FUZZTIME. `go test -fuzz` builds and links
# an instrumented test binary for each target it runs, so a package's binary is built
# once (`go test -c -fuzz .`: the flag only instruments) and runs each of its targets,
# found with the binary's -test.list, from the package directory as `go test` would
# (testdata/fuzz is read there and a failing input written there), with the flags
# and fuzz cache directory `go test` passes. The packages are those whose test files
# declare a Fuzz function (go list and grep: no test binary is built to find them).
# Output is shown only for a failing target (it names the crasher under testdata/fuzz).
# Go 1.26's fuzz coordinator can end a duration-bound run with a bare "context
# deadline exceeded" and no failing input (go.dev/issue/75804, fixed in Go
# 1.27): that is not a finding, so only a run that wrote a failing input, or
# failed otherwise, fails the target.

# Sets $$pkgs to "importpath dir" lines: the packages whose test files declare a
# Fuzz function (go list and grep: no test binary is built to find them).
FUZZ_FIND = files=$$($(GO) list -f '{{$$p := .ImportPath}}{{$$d := .Dir}}{{range .TestGoFiles}}{{$$p}} {{$$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$$p}} {{$$d}}/{{.}}{{"\n"}}{{end}}' $(FUZZ_PKGS)) || \
		{ printf '%s\n' "$$files"; exit 1; }; \
	pkgs=$$(printf '%s\n' "$$files" | while read -r pkg file; do \
		[ -z "$$file" ] || ! grep -q '^func Fuzz' "$$file" || echo "$$pkg $$(dirname "$$file")"; done | sort -u); \
	mkdir -p '$(FUZZ_BIN)' && bindir=$$(cd '$(FUZZ_BIN)' && pwd) || exit 1

fuzz-build: ## Build make fuzz's instrumented test binaries into bin/fuzz, one per package with Fuzz targets
	@$(FUZZ_FIND); \
	printf '%s\n' "$$pkgs" | { while read -r pkg dir; do \
		[ -n "$$pkg" ] || continue; \
		out=$$($(GO) test -c -fuzz . -o "$$bindir/$$(printf '%s' "$$pkg" | tr '/' '_').test" "$$pkg" 2>&1 </dev/null) || { printf '%s\n' "$$out"; exit 1; }; \
	done; }

fuzz: fuzz-build ## Run every Fuzz target for FUZZTIME (default 5s) each, from one instrumented test binary per package
	@$(FUZZ_FIND); \
	if [ -z "$$pkgs" ]; then echo 'fuzz: no Fuzz targets'; exit 0; fi; \
	cache=$$($(GO) env GOCACHE) || exit 1; \
	printf '%s\n' "$$pkgs" | { while read -r pkg dir; do \
		bin="$$bindir/$$(printf '%s' "$$pkg" | tr '/' '_').test"; \
		names=$$(cd "$$dir" && "$$bin" -test.list '^Fuzz' 2>&1 </dev/null) || { printf '%s\n' "$$names"; exit 1; }; \
		for name in $$(printf '%s\n' "$$names" | grep -E '^Fuzz[A-Za-z0-9_]*$$'); do \
			echo "fuzz: $$pkg $$name ($(FUZZTIME))"; \
			out=$$(cd "$$dir" && "$$bin" -test.paniconexit0 -test.timeout=10m0s -test.run '^$$' \
				-test.fuzz '^'"$$name"'$$' -test.fuzztime $(FUZZTIME) -test.fuzzminimizetime 100x \
				-test.fuzzcachedir "$$cache/fuzz/$$pkg" 2>&1 </dev/null) && continue; \
			case "$$out" in \
			*'Failing input written to'*) printf '%s\n' "$$out"; echo "fuzz: $$pkg $$name failed; the input is under $$dir" >&2; exit 1;; \
			*'context deadline exceeded'*) echo "fuzz: $$name: the fuzz coordinator's end-of-fuzztime race (go.dev/issue/75804), no failing input: not a failure";; \
			*) printf '%s\n' "$$out"; echo "fuzz: $$pkg $$name failed" >&2; exit 1;; \
			esac; \
		done; \
	done; }

# The steps run one after another (also under -j) and stop at the first failure.
test: ## tools, verify-generated, vet, staticcheck, helm-check, docs, test-go (RACE_PKGS under -race), fuzz
	@$(MAKE) --no-print-directory tools
	@$(MAKE) --no-print-directory verify-generated
	@$(MAKE) --no-print-directory fmt-check
	@$(MAKE) --no-print-directory vet
	@$(MAKE) --no-print-directory staticcheck
	@$(MAKE) --no-print-directory helm-check
	@$(MAKE) --no-print-directory docs
	@$(MAKE) --no-print-directory image-binary-cache
	@$(MAKE) --no-print-directory test-go-race-fuzz

bench: tools ## Run all benchmarks; raw output also goes to bin/bench.txt
	@mkdir -p $(BIN)
	@rc=$(BIN)/.bench.rc; \
	{ $(GO) test -run '^$$' -bench . -benchmem -timeout $(TEST_TIMEOUT) ./...; echo $$? >"$$rc"; } \
		| tee $(BIN)/bench.txt; \
	status=$$(cat "$$rc"); rm -f "$$rc"; exit "$$status"

# `make bench` runs this benchmark too (it is in ./...); this target runs it alone.
bench-admission: tools ## Pod creates through kube-apiserver: no policy vs Portal's webhook vs a ValidatingAdmissionPolicy
	@$(GO) test -run '^$$' -bench '^BenchmarkAdmission$$' -benchtime 1x -timeout $(TEST_TIMEOUT) ./test/bench/admission/

# `make bench` runs this benchmark too (it is in ./...); this target runs it alone.
bench-audit: tools ## 10,000 pods through kube-apiserver, Portal in audit mode: event-to-report/alert latency, RSS, API writes
	@$(GO) test -run '^$$' -bench '^BenchmarkAudit$$' -benchtime 1x -timeout $(TEST_TIMEOUT) ./test/bench/audit/

# `make bench` runs these benchmarks too (they are in ./...); this target runs them alone.
bench-runtime: tools ## Runtime events: per core, memory at 10k/s, request to action and API create latency under an audited flood
	@$(GO) test -run '^$$' -bench 'BenchmarkRuntime(Evaluate|MemoryAt10kPerSecond)' -cpu 1 ./internal/runtime/
	@$(GO) test -run '^$$' -bench '^BenchmarkRuntime' -benchtime 1x -timeout $(TEST_TIMEOUT) ./test/bench/runtime/

KYVERNO_TOOLS_DEPS := hack/tools/kyverno/go.mod hack/tools/kyverno/go.sum

# The Kyverno CLI, only for bench-eval-kyverno: not part of `make tools`.
$(BIN)/kyverno: $(KYVERNO_TOOLS_DEPS)
	@echo 'tools: building $@'
	@mkdir -p $(@D)
	@cd hack/tools/kyverno && $(GO) build -ldflags '$(TOOL_LDFLAGS)' -o '$(CURDIR)/$@' github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno
	@touch $@

# Not in `make bench` (a build tag keeps it out of ./...): building the Kyverno CLI
# takes many minutes.
bench-eval-kyverno: $(BIN)/kyverno ## portal eval vs kyverno apply (podSecurity restricted), 10,000 pods per input shape, one core each: ratio per shape, verdicts agree; then bench-kyverno-parity
	@PORTAL_KYVERNO='$(CURDIR)/$(BIN)/kyverno' $(GO) test -tags kyverno -run '^$$' -bench '^BenchmarkEvalVsKyverno$$' -benchtime 3x -timeout $(TEST_TIMEOUT) ./internal/eval/
	@$(MAKE) --no-print-directory bench-kyverno-parity

# Kyverno's policies are read from its module's kyverno-policies chart (helm template)
# at run time, never copied into the repository.
# -v: the per-pair table is a log, which go test cuts to ten lines without it.
bench-kyverno-parity: $(BIN)/kyverno $(BIN)/helm ## Every kyverno-policies chart policy (ClusterPolicy and ValidatingPolicy form) against its library rule on generated workloads: per-pair agreement; fails on a difference docs/library.md does not list
	@PORTAL_KYVERNO='$(CURDIR)/$(BIN)/kyverno' $(GO) test -v -tags kyverno -run '^$$' -bench '^BenchmarkKyvernoParity$$' -benchtime 1x -timeout $(TEST_TIMEOUT) ./internal/eval/

## ---- WAF proxy -------------------------------------------------------------

.PHONY: test-crs bench-tools bench-waf

# The suite is a package of ./..., so `make test-go` (and `make test`) runs it
# already; this target runs it alone and prints the pass rate.
test-crs: ## OWASP CRS regression suite (go-ftw) against the waf-proxy; prints the pass rate
	@$(GO) test -count=1 -v -run '^TestCRSRegression$$' -timeout $(TEST_TIMEOUT) ./test/crs/

# Debian packages of the WAF peer benchmark: nginx with ModSecurity v3, and wrk.
BENCH_PKGS := nginx libnginx-mod-http-modsecurity wrk

bench-tools: ## Install nginx, libnginx-mod-http-modsecurity and wrk (apt-get) when missing
	@$(call apt_install,bench-tools,$(BENCH_PKGS))

# The waf-proxy and nginx + ModSecurity run the same CRS v4.25 files (extracted
# to bin/bench-waf) in front of the same upstream, under the same wrk runs: a
# per-core table (each WAF pinned alone to CPU 1, wrk on CPU 0, via taskset)
# and a two-core table (everything on every CPU).
bench-waf: bench-tools build ## waf-proxy vs nginx+ModSecurity with the CRS, per core and on two cores, driven by wrk; report in bin/bench-waf.txt
	@$(GO) run ./internal/waf/proxy/peerbench -portal $(BIN)/portal -work $(BIN)/bench-waf -out $(BIN)/bench-waf.txt

## ---- build and run ---------------------------------------------------------

build: ## Build bin/portal (stamped with the git commit: portal version)
	@$(GO) build -buildvcs=auto -o $(BIN)/portal ./cmd/portal

# Demo: evaluate the example manifests against the pod-security rules. Exit status 1
# means "deny found", which is what the demo shows, so it does not fail the target.
# `portal dev` (a local control plane with the admission webhook) replaces this later.
# What `portal dev` runs without a node: nothing else of `tools` (no node
# binaries, no apt packages, no root), so the first `make run` builds only these.
DEV_BINS := $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(K8S_BIN)/etcd

run: $(DEV_BINS) build ## Run portal dev: a local control plane with Portal in it (Ctrl-C stops it); builds only kube-apiserver, etcd, kubectl and bin/portal; flags in ARGS (make run ARGS='--runtime')
	@$(BIN)/portal dev $(ARGS)

# Needs root: the node changes mounts, cgroups, interfaces and iptables (and undoes it).
run-node: tools build ## Run portal dev --node: the same, with a node running real pods (needs root)
	@$(BIN)/portal dev --node $(ARGS)

# portal eval exits 1 when a deny rule fails, which is what this demo shows.
eval-demo: build ## Evaluate the pod-security bundle on examples/manifests offline
	@$(BIN)/portal eval --rules examples/rules/pod-security --file examples/manifests || test $$? -eq 1

clean: ## Remove build outputs (keeps bin/k8s; see clean-tools)
	@rm -f $(BIN)/portal $(BIN)/bench.txt $(BIN)/.bench.rc
	@rm -rf $(BIN)/site $(FUZZ_BIN)

clean-tools: ## Remove bin/k8s (with the node binaries), bin/alertmanager, bin/helm, bin/versitygw, bin/istioctl and bin/kyverno (the next `make tools` rebuilds what it needs)
	@rm -rf $(K8S_BIN) $(BIN)/alertmanager $(BIN)/helm $(BIN)/versitygw $(BIN)/istioctl $(BIN)/kyverno

## ---- image and Helm chart ------------------------------------------------

.PHONY: image helm-check helm-golden helm-docs

IMAGE_DIR  := $(BIN)/image
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
# Reproducible: the same commit gives the same binary, image digest and SBOM.
VERSION           ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)

# -tags portal_nodev leaves `portal dev` out: its envtest creates a directory
# under $HOME or $TMPDIR at start, which a read-only root filesystem refuses.
image: ## Build the OCI image of portal into bin/image (oci/, portal.tar, digest) and its SBOM bin/image/sbom.cdx.json, offline
	@mkdir -p $(BIN)/image-build
	@CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -buildvcs=false -trimpath -tags portal_nodev \
		-ldflags '-s -w -buildid= -X main.version=$(VERSION)' -o $(BIN)/image-build/portal ./cmd/portal
	@$(GO) run ./hack/image -binary $(BIN)/image-build/portal -out $(IMAGE_DIR) -version '$(VERSION)' \
		-revision '$(REVISION)' -arch $(IMAGE_ARCH) -source-date-epoch '$(SOURCE_DATE_EPOCH)' >/dev/null
	@$(GO) tool cyclonedx-gomod bin -json -noserial -notimestamp -version '$(VERSION)' \
		-output $(IMAGE_DIR)/sbom.cdx.json $(BIN)/image-build/portal
	@echo "image: portal:$(VERSION) $$(cat $(IMAGE_DIR)/digest) in $(IMAGE_DIR) (docker load -i $(IMAGE_DIR)/portal.tar)"

HELM_CHART := deploy/helm/portal

# helm lint with every values file of the golden tests, and the values
# reference page is what hack/helmdocs makes of values.yaml. The golden
# template tests themselves run in test-go (deploy/helm).
helm-check: $(BIN)/helm ## helm lint --strict the chart with each test values file; fail when docs/reference/helm-values.md is stale
	@$(BIN)/helm lint --strict --quiet $(HELM_CHART) >/dev/null || $(BIN)/helm lint --strict $(HELM_CHART)
	@for f in deploy/helm/testdata/values/*.yaml; do \
		$(BIN)/helm lint --strict --quiet $(HELM_CHART) --values "$$f" >/dev/null || { $(BIN)/helm lint --strict $(HELM_CHART) --values "$$f"; exit 1; }; \
	done
	@$(GO) run ./hack/helmdocs -check

helm-golden: $(BIN)/helm ## Rewrite the chart's golden template outputs its copies of deploy/crds and the openreports.io CRDs, then regenerate the values reference
	@UPDATE_GOLDEN=1 $(GO) test -count=1 -run '^(TestChartCRDsMatchDeployCRDs|TestChartOpenReportsCRDsMatchModule)$$' ./deploy/helm/
	@UPDATE_GOLDEN=1 $(GO) test -count=1 -run '^TestGoldenTemplates$$' ./deploy/helm/
	@$(MAKE) --no-print-directory helm-docs

helm-docs: ## Generate docs/reference/helm-values.md from the comments in the chart's values.yaml
	@$(GO) run ./hack/helmdocs

## ---- documentation site ----------------------------------------------------

.PHONY: docs docs-tools docs-generate docs-check

# The generators of the reference pages: the CRD field tables (between
# "<!-- generated:start NAME" and "<!-- generated:end NAME -->") from
# deploy/crds, the metrics index from the metrics Portal registers, and the
# cookbook from examples/rules/best-practices and its fixtures. The
# command reference (docs/reference/cli-flags.md) is written by a test of
# cmd/portal, which is package main: UPDATE_DOCS=1
# writes it; without, the test fails when it is stale or when a flag table of
# cli.md or waf-proxy.md misses a flag or names one that does not exist.
DOCS_GENERATORS := crddocs metricsdocs cookbookdocs costdocs
CLI_DOCS_TEST   := $(GO) test -count=1 -run '^(TestCLIReference|TestCLIPageFlagTablesMatchCommands)$$' ./cmd/portal/
# The NetworkPolicy checks table of docs/concepts/network-analysis.md, from the check registry.
CHECK_DOCS_TEST := $(GO) test -count=1 -run '^TestChecksDocs$$' ./internal/network/

docs-generate: ## Regenerate the generated reference pages and blocks (CRD fields, commands and flags, metrics index, cookbook, network checks)
	@for g in $(DOCS_GENERATORS); do $(GO) run ./hack/$$g || exit 1; done
	@UPDATE_DOCS=1 $(CLI_DOCS_TEST) >/dev/null
	@UPDATE_DOCS=1 $(CHECK_DOCS_TEST) >/dev/null

docs-check: ## Fail when a generated reference page or block is stale (run make docs-generate)
	@for g in $(DOCS_GENERATORS); do $(GO) run ./hack/$$g -check || exit 1; done
	@out=$$($(CLI_DOCS_TEST) 2>&1) || { printf '%s\n' "$$out" >&2; exit 1; }
	@out=$$($(CHECK_DOCS_TEST) 2>&1) || { printf '%s\n' "$$out" >&2; exit 1; }

# Debian's mkdocs (1.4) and mkdocs-material, as bench-tools installs its packages.
DOCS_PKGS := mkdocs mkdocs-material python3-pymdownx
SITE_DIR  ?= $(BIN)/site

docs-tools: ## Install mkdocs, mkdocs-material and python3-pymdownx (apt-get) when missing
	@$(call apt_install,docs-tools,$(DOCS_PKGS))

# Strict: a warning fails the build, and hack/mkdocs/hooks.py warns on every
# broken link or anchor. The fixture in hack/mkdocs/testdata/broken must fail
# with each of its breakages, so a hook that stops checking fails here too.
docs: docs-tools docs-check ## Build the documentation site into bin/site (mkdocs --strict: a broken link or anchor fails); fail on stale generated pages
	@out=$$(mkdocs build --strict --site-dir '$(SITE_DIR)' 2>&1) || { printf '%s\n' "$$out" | grep -E 'WARNING|ERROR|Error|Aborted' >&2; exit 1; }
	@tmp=$$(mktemp -d) || exit 1; trap 'rm -rf "$$tmp"' EXIT; \
	if mkdocs build --strict --config-file hack/mkdocs/testdata/broken/mkdocs.yml --site-dir "$$tmp/site" >"$$tmp/log" 2>&1; then \
		echo 'docs: the broken-links fixture built without warnings: the link checks in hack/mkdocs/hooks.py do not work' >&2; exit 1; \
	fi; \
	for want in "which is not a file or directory in the repository" "has no heading with anchor #nope" \
		"has no anchor #no-such-anchor" "has no anchor #nothing-here" "which the site does not have"; do \
		grep -qF "$$want" "$$tmp/log" || { echo "docs: the broken-links fixture did not report: $$want" >&2; cat "$$tmp/log" >&2; exit 1; }; \
	done
