# Developer and CI entry points. `make test` works on a fresh machine: it builds
# .venv from pyproject.toml when missing or stale.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo lint unit proto bench binary binaries bundle clean k8s

# The pinned upstream Kubernetes components (upstream/: one Go module, one binary that
# dispatches to etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl),
# built from the Go module proxy into .cache/k8s/<version>/. Go's own module and build caches
# (outside the repo) make a rebuild in a fresh clone a relink.
K8S_VERSION := $(shell sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([^ ]*\)$$/v\1/p' upstream/go.mod)
K8S_DIR     := .cache/k8s/$(K8S_VERSION)
K8S_BIN     := $(K8S_DIR)/upstream
K8S_TOOLS   := etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
K8S_LDFLAGS := -s -w $(foreach pkg,k8s.io/client-go/pkg/version k8s.io/component-base/version,\
	-X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitTreeState=clean \
	-X $(pkg).gitMajor=$(word 1,$(subst ., ,$(K8S_VERSION:v%=%))) \
	-X $(pkg).gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION:v%=%))))

test: $(STAMP) k8s
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

# The whole driver end to end on a simulated cluster (README, first section). More shapes:
# make demo DEMO_ARGS="--nodes 8 --cliques 2 --mode hostManaged --json"
demo: $(STAMP)
	$(VENV)/bin/compute-domain-sim demo $(DEMO_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

unit: $(STAMP)
	$(PY) -m pytest -q

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (set PYTHON=...)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# Benchmarks (long; not part of `make test`): tables on stdout and in tests/bench/RESULTS.md.
bench: $(STAMP) k8s
	$(PY) tests/bench/bench_apiserver.py
	$(PY) tests/bench/bench_controller.py
	$(PY) tests/bench/bench_prepare.py
	$(PY) packaging/pyinstaller/build.py --dist dist --if-stale
	$(PY) tests/bench/bench_prepare.py --agent dist/compute-domain-agent
	$(PY) tests/bench/bench_bringup.py
	$(PY) tests/bench/bench_controlplanes.py
	$(PY) tests/bench/bench_label_repair.py
	$(PY) tests/bench/bench_k8s_build.py

# The single-file agent (PyInstaller onefile): dist/compute-domain-agent. Runs without Python.
binary: $(STAMP)
	$(PY) packaging/pyinstaller/build.py --dist dist

# The agent and the controller (what the container image ships).
binaries: $(STAMP)
	$(PY) packaging/pyinstaller/build.py --dist dist --target all

# dist/bundle: binary + systemd unit + env file + install.sh, to carry to an air-gapped host.
bundle: binary
	sh packaging/install.sh bundle dist/bundle

k8s: $(K8S_DIR)/.linked

$(K8S_BIN): upstream/go.mod upstream/go.sum $(wildcard upstream/*.go)
	@command -v go >/dev/null || { echo "make k8s needs Go (see upstream/go.mod for the version)" >&2; exit 1; }
	@mkdir -p $(K8S_DIR)
	cd upstream && go build -trimpath -buildvcs=false -ldflags '$(K8S_LDFLAGS)' -o ../$(K8S_BIN).tmp .
	mv $(K8S_BIN).tmp $(K8S_BIN)

$(K8S_DIR)/.linked: $(K8S_BIN)
	cd $(K8S_DIR) && for tool in $(K8S_TOOLS); do ln -sf upstream $$tool; done
	@touch $@

# Regenerate the kubelet gRPC stubs from api/kubelet/**/*.proto (committed).
proto: $(STAMP)
	$(PY) -m api.kubelet.generate

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
