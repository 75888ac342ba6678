# Developer and CI entry points. `make test` works on a fresh machine: it builds
# .venv from pyproject.toml when missing or stale.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test e2e demo lint unit proto bench binary binaries bundle clean k8s helm manifests refsuite \
	image image-push image-save print-image

# The pinned upstream Kubernetes components (upstream/: one Go module, one binary that
# dispatches to etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl),
# built from the Go module proxy into .cache/k8s/<version>/. Go's own module and build caches
# (outside the repo) make a rebuild in a fresh clone a relink.
K8S_VERSION := $(shell sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([^ ]*\)$$/v\1/p' upstream/go.mod)
K8S_DIR     := .cache/k8s/$(K8S_VERSION)
K8S_BIN     := $(K8S_DIR)/upstream
K8S_TOOLS   := etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
K8S_LDFLAGS := -s -w $(foreach pkg,k8s.io/client-go/pkg/version k8s.io/component-base/version,\
	-X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitTreeState=clean \
	-X $(pkg).gitMajor=$(word 1,$(subst ., ,$(K8S_VERSION:v%=%))) \
	-X $(pkg).gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION:v%=%))))

# The pinned Helm CLI (upstream/helm/: its own Go module, so helm's Kubernetes libraries
# leave upstream/go.mod alone; a `tool` directive names helm.sh/helm/v3/cmd/helm), built from
# the Go module proxy into .cache/bin/helm with the version stamps helm's own Makefile sets:
# the release, its commit (the proxy's record of the tag), a clean tree, and the Kubernetes
# version of the client-go it links (what `helm template` reports as .Capabilities.KubeVersion).
HELM_VERSION   := $(shell sed -n 's/^[[:space:]]*helm.sh\/helm\/v3 \(v[^ ]*\).*$$/\1/p' upstream/helm/go.mod)
HELM_K8S_MINOR := $(shell sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*$$/\1/p' upstream/helm/go.mod)
HELM_BIN       := .cache/bin/helm
HELM_LDFLAGS   := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.metadata= \
	-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	$(foreach pkg,helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil,\
	-X $(pkg).k8sVersionMajor=1 -X $(pkg).k8sVersionMinor=$(HELM_K8S_MINOR))

# Two tiers, each on PYTEST_WORKERS pytest-xdist workers, each printing its wall time.
# `make test`: lint, mypy (strict, as [tool.mypy] in pyproject.toml sets) and every test not
# marked e2e. `make e2e`: the e2e tier (tests/conftest.py says what it holds) with the frozen
# agent built first when stale, so the workers share it instead of building one each.
PYTEST_WORKERS ?= 2
PYTEST_XDIST   := -n $(PYTEST_WORKERS) --dist worksteal
# $(call timed,NAME,COMMANDS): run COMMANDS, then say how long they took and how they ended.
timed = @start=$$(date +%s); rc=0; $(2) || rc=$$?; \
	echo "make $(1): $$(( $$(date +%s) - start )) s wall (exit $$rc)"; exit $$rc

test: $(STAMP) k8s helm
	$(call timed,test,$(VENV)/bin/ruff check . && $(VENV)/bin/mypy && \
		$(PY) -m pytest $(PYTEST_XDIST) -m 'not e2e' $(PYTEST_ARGS))

e2e: $(STAMP) k8s helm
	$(call timed,e2e,$(PY) packaging/pyinstaller/build.py --dist dist --if-stale && \
		$(PY) -m pytest $(PYTEST_XDIST) -m e2e $(PYTEST_ARGS))

# The whole driver end to end on a simulated cluster (README, first section). More shapes:
# make demo DEMO_ARGS="--nodes 8 --cliques 2 --mode hostManaged --json"
demo: $(STAMP)
	$(VENV)/bin/compute-domain-sim demo $(DEMO_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_XDIST) -m 'not e2e'

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (set PYTHON=...)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# Benchmarks (long; not part of `make test`): tables on stdout and in tests/bench/RESULTS.md.
# The reference driver's own ComputeDomain bats tests against ours, in the simulated cluster
# (tests/refsuite/run.py): REFERENCE is a checkout of the reference, which no registry here
# serves; REFSUITE_ARGS e.g. `--control-plane kubernetes` or `--filter 'leader election'`.
refsuite: $(STAMP) k8s helm
	@test -n "$(REFERENCE)" || { echo "usage: make refsuite REFERENCE=<a checkout of https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu>" >&2; exit 2; }
	$(PY) tests/refsuite/run.py --reference "$(REFERENCE)" $(REFSUITE_ARGS)

bench: $(STAMP) k8s helm
	$(PY) tests/bench/bench_apiserver.py
	$(PY) tests/bench/bench_controller.py
	$(PY) tests/bench/bench_prepare.py
	$(PY) packaging/pyinstaller/build.py --dist dist --if-stale
	$(PY) tests/bench/bench_prepare.py --agent dist/compute-domain-agent
	$(PY) tests/bench/bench_bringup.py
	$(PY) tests/bench/bench_controlplanes.py
	$(PY) tests/bench/bench_kubelets.py
	$(PY) tests/bench/bench_label_repair.py
	$(PY) tests/bench/bench_k8s_build.py

# packaging/deploy/<mode>.yaml (static manifests for `kubectl apply -f`) from the Helm chart;
# tests/packaging/test_deploy_manifests.py fails while they are stale.
manifests: $(STAMP) helm
	$(PY) -m sim.cluster.manifests --helm $(HELM_BIN)

# The single-file agent (PyInstaller onefile): dist/compute-domain-agent. Runs without Python.
binary: $(STAMP)
	$(PY) packaging/pyinstaller/build.py --dist dist

# The agent and the controller (what the container image ships).
binaries: $(STAMP)
	$(PY) packaging/pyinstaller/build.py --dist dist --target all

# The container image (Dockerfile): one image for the controller, the kubelet plugin and the
# IMEX daemon pods. Its reference is the chart's default one, <repository>:v<version>, with the
# version from api/version.py (Chart.yaml's appVersion is held equal to it by
# tests/packaging/test_helm_chart.py, and the chart's empty image.tag means v<appVersion>).
# For a private registry: make image image-push IMAGE_REPOSITORY=registry.example.com/cd, then
# helm --set image.repository=registry.example.com/cd (the tag needs no setting).
# Not part of `make test`: it needs docker or podman (CONTAINER_TOOL=...).
VERSION          := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' api/version.py)
IMAGE_REPOSITORY ?= nvcr.io/nvidia/compute-domain-driver
IMAGE_TAG        ?= v$(VERSION)
IMAGE            := $(IMAGE_REPOSITORY):$(IMAGE_TAG)
IMAGE_ARCHIVE    ?= dist/compute-domain-driver-$(IMAGE_TAG).tar
CONTAINER_TOOL   ?= $(firstword $(foreach tool,docker podman,$(if $(shell command -v $(tool) 2>/dev/null),$(tool))))
need_container_tool = @test -n "$(CONTAINER_TOOL)" || { echo "make $@ needs a container engine: install Docker \
(https://docs.docker.com/engine/install/) or Podman (https://podman.io/docs/installation), \
or name one with CONTAINER_TOOL=..." >&2; exit 1; }; \
	$(CONTAINER_TOOL) info >/dev/null 2>&1 || { echo "make $@: $(CONTAINER_TOOL) is installed \
but its engine does not answer ($(CONTAINER_TOOL) info fails): start it (systemctl start docker) \
or use another with CONTAINER_TOOL=..." >&2; exit 1; }

# The image reference `make image` tags (the test of the chart's default image reads it).
print-image:
	@echo $(IMAGE)

image:
	$(need_container_tool)
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

image-push:
	$(need_container_tool)
	$(CONTAINER_TOOL) push $(IMAGE)

# One file to carry into an air-gapped site: `ctr -n k8s.io images import` (containerd),
# `podman load -i` (CRI-O) or `docker load -i` on each node (README, "Air-gapped install").
image-save:
	$(need_container_tool)
	@mkdir -p $(dir $(IMAGE_ARCHIVE))
	$(CONTAINER_TOOL) save -o $(IMAGE_ARCHIVE) $(IMAGE)
	@echo "wrote $(IMAGE_ARCHIVE) ($(IMAGE))"

# dist/bundle: binary + systemd unit + env file + install.sh, to carry to an air-gapped host.
bundle: binary
	sh packaging/install.sh bundle dist/bundle

k8s: $(K8S_DIR)/.linked $(K8S_DIR)/cri/.generated

# The CRI v1 stubs of the sim's container runtime (sim/cri), from the pinned k8s.io/cri-api's
# own api.proto in Go's module cache, and the SPDY/3 header dictionary of its streaming
# server, from the pinned github.com/moby/spdystream (nothing copied into the repository).
$(K8S_DIR)/cri/.generated: $(K8S_BIN) $(STAMP) sim/cri/protos.py
	@echo "make k8s: generating the CRI v1 stubs and the SPDY/3 dictionary into $(K8S_DIR)/cri"
	$(PY) -m sim.cri.protos $(K8S_DIR)/cri \
		"$$(cd upstream && go list -m -f '{{.Dir}}' k8s.io/cri-api)/pkg/apis/runtime/v1/api.proto" \
		"$$(cd upstream && go list -m -f '{{.Dir}}' github.com/moby/spdystream)"
	@touch $@

$(K8S_BIN): upstream/go.mod upstream/go.sum $(wildcard upstream/*.go)
	@command -v go >/dev/null || { echo "make k8s needs Go (see upstream/go.mod for the version)" >&2; exit 1; }
	@mkdir -p $(K8S_DIR)
	@echo "make k8s: building $(K8S_BIN), one binary for $(K8S_TOOLS) (a cold Go build cache takes minutes)"
	@start=$$(date +%s); \
	( n=0; while sleep 1; do n=$$((n + 1)); [ $$((n % 30)) -ne 0 ] || echo "make k8s: still building ($$(( $$(date +%s) - start ))s)"; done ) & ticker=$$!; \
	(cd upstream && go build -trimpath -buildvcs=false -ldflags '$(K8S_LDFLAGS)' -o ../$(K8S_BIN).tmp .); \
	status=$$?; kill $$ticker 2>/dev/null; \
	[ $$status -eq 0 ] || exit $$status; \
	echo "make k8s: built $(K8S_BIN) in $$(( $$(date +%s) - start ))s"
	mv $(K8S_BIN).tmp $(K8S_BIN)

$(K8S_DIR)/.linked: $(K8S_BIN)
	@cd $(K8S_DIR) && for tool in $(K8S_TOOLS); do ln -sf upstream $$tool && echo "make k8s: linked $(K8S_DIR)/$$tool"; done
	@touch $@

helm: $(HELM_BIN)

$(HELM_BIN): upstream/helm/go.mod upstream/helm/go.sum
	@command -v go >/dev/null || { echo "make helm needs Go (see upstream/helm/go.mod for the version)" >&2; exit 1; }
	@mkdir -p $(dir $(HELM_BIN))
	cd upstream/helm && commit=$$(go mod download -json helm.sh/helm/v3@$(HELM_VERSION) | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p') && \
	go build -trimpath -buildvcs=false -ldflags "$(HELM_LDFLAGS) -X helm.sh/helm/v3/internal/version.gitCommit=$$commit" \
		-o ../../$(HELM_BIN).tmp helm.sh/helm/v3/cmd/helm
	mv $(HELM_BIN).tmp $(HELM_BIN)

# Regenerate the kubelet gRPC stubs from api/kubelet/**/*.proto (committed).
proto: $(STAMP)
	$(PY) -m api.kubelet.generate

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
