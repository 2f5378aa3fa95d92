PREFIX ?= /opt/cni/bin
CARGO ?= cargo
PODMAN ?= podman
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE ?= localhost/sriov-rdma

.PHONY: all build release bench-bins image test unit e2e k8s-e2e k8s-components helm chart manifests lint bench bench-scale bench-vm install demo demo-host deps clean mutants

all: release

# When each phase of `make test` begins, in seconds since T0 (.ci/run sets it; else the start of this make).
ifndef T0
T0 := $(shell date +%s)
endif
export T0
PHASE = @echo "phase $@: begins at +$$(( $$(date +%s) - $(T0) ))s"

build:
	$(CARGO) build --workspace

# Static executables (glibc linked in, see .cargo/config.toml): they start on any node. Both binaries:
# sriov-rdma (the CNI) and sriov-rdma-device-plugin (the daemon `sriov-rdma device-plugin` runs).
release:
	$(PHASE)
	$(CARGO) build --release --workspace

# The benchmarks cni-bench and netns-floor use the fake sysfs tree (the fixtures feature), which sriov-rdma is
# built without; this builds only them, into target/release, and leaves sriov-rdma there as it is. The
# emulated machine's initramfs carries them (tests/vm/build-initramfs.sh).
bench-bins:
	$(PHASE)
	$(CARGO) build --release --features fixtures --bin cni-bench --bin netns-floor

# The installer image (FROM scratch: the static binary, entrypoint `sriov-rdma install`), built offline.
image: deps release
	$(PHASE)
	$(PODMAN) build -f Containerfile --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) -t $(IMAGE):latest .

# Installs what the build and the tests need (Debian): iproute2, the reference IPAM plugins, podman, runc,
# busybox, glibc's static libraries.
deps:
	./scripts/install-deps.sh

# The test command: lint, unit and real-netns integration tests, then the emulated SR-IOV machine (root), then
# the Kubernetes nodes on it. The cluster's components (Go builds: ~16 min on a fresh machine, nothing when
# cached) build in the background at nice 19 from the start, on the CPU the Rust build's single-threaded
# stretches, the tests and the e2e guests leave idle; k8s-e2e waits for them and prints their log. Helm is not
# among them: `make chart` builds it in the foreground (the same cache directory must not be written twice at
# once); a component missing from the list is built by k8s-e2e's own k8s-components. A failed unit or e2e stops
# the background build (its own process group). k8s-e2e's make takes deps, release and bench-bins as done (-o):
# they ran before unit and e2e (in the run of 7 December cargo compiled the release again there, 162 s for the
# same sources, after unit's tests, one of which runs `cargo build --release` itself).
BG_COMPONENTS = kubernetes etcd containerd runc cri-tools multus rdma-cni whereabouts
test: deps
	@mkdir -p .cache; echo "phase k8s-components-background: begins at +$$(( $$(date +%s) - $(T0) ))s (nice 19, beside unit and e2e)"; \
	setsid nice -n 19 ./tests/k8s/build-components.sh $(BG_COMPONENTS) > .cache/k8s-components.log 2>&1 & bg=$$!; \
	$(MAKE) --no-print-directory unit e2e; rc=$$?; \
	if [ $$rc != 0 ]; then kill -- -$$bg 2>/dev/null; wait $$bg; exit $$rc; fi; \
	wait $$bg; brc=$$?; \
	echo "phase k8s-components-background: ended at +$$(( $$(date +%s) - $(T0) ))s, exit $$brc"; \
	sed 's/^/k8s-components: /' .cache/k8s-components.log; \
	[ $$brc = 0 ] || exit $$brc; \
	$(MAKE) --no-print-directory -o deps -o release -o bench-bins k8s-e2e

# The soak, crash and fuzz tests run on their own line with --nocapture so their figures (cycles/s,
# seeds, trials, iterations) show; plain `cargo test` runs them with everything else. --workspace: the features of
# the dependencies are then those of the line before, whose builds it reuses (without it cargo compiled 27 crates
# again for the root package alone, 43 s of a cold CI run).
LONG_TESTS = a_thousand_add_del_cycles_leak_nothing sigkill_at_random_moments mutated_configs_and_env

# tests/install.rs checks the release binary and the image built from it: build it first.
unit: deps release chart
	$(PHASE)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace --all-targets -- --test-threads=4 $(addprefix --skip ,$(LONG_TESTS))
	$(CARGO) test --workspace --test soak --test crash --test fuzz -- --nocapture

# Guest kernels of the emulated SR-IOV machine: 6.12 (bookworm-backports) and 7 (trixie-backports, the one
# whose Soft-RoCE carries traffic from inside a pod netns; see tests/vm/rdma-probe.sh).
E2E_KERNELS ?= 6.12 7
DEMO_KERNEL ?= 7
BENCH_KERNEL ?= 6.12

# Real VFs: QEMU igb (SR-IOV) under each of E2E_KERNELS, one after the other; fails if any fails.
# Downloads are cached in .cache/vm.
e2e: release bench-bins
	$(PHASE)
	KERNEL="$(E2E_KERNELS)" ./tests/vm/run.sh e2e

# A real single-node Kubernetes cluster: the control plane on this host, containerd + the kubelet + Multus in
# the emulated SR-IOV machine (kernel 7: Soft-RoCE traffic between pods), the scenarios with kubectl only.
# The components are built once from their Go modules into /var/cache/sriov-rdma-cni/components.
K8S_KERNEL ?= 7
# dra.sh's GPU alignment (DRA_GPU=0 leaves it out): the stand-in GPU DRA driver, test code, goes onto node A.
DRA_GPU ?= 1
export DRA_GPU
k8s-e2e: image bench-bins k8s-components
	$(PHASE)
	[ "$(DRA_GPU)" != 1 ] || $(CARGO) build --release -p sriov-rdma-device-plugin --example standin-gpu
	KERNEL=$(K8S_KERNEL) ./tests/vm/run.sh k8s

k8s-components:
	$(PHASE)
	./tests/k8s/build-components.sh

# The Helm CLI (pinned in tests/k8s/build-components.sh), built once from its Go module into the components cache.
helm:
	$(PHASE)
	./tests/k8s/build-components.sh helm

# The chart deploy/helm/sriov-rdma: helm lint, helm template with the defaults and values that change the output,
# and deploy/sriov-rdma.yaml (the kustomize base's DaemonSet and ConfigMap) equal to a fresh render.
chart: helm
	$(PHASE)
	./scripts/chart.sh check

# deploy/sriov-rdma.yaml rendered from the chart (`helm template`): the one source of both is the chart.
manifests: helm
	./scripts/chart.sh render

# The main job: one VF (and an RDMA device) attached to a pod with cnitool on the emulated SR-IOV machine.
demo: deps release bench-bins
	KERNEL=$(DEMO_KERNEL) ./tests/vm/run.sh demo

# The same flow on this host, with a veth standing in for the VF.
demo-host: deps release
	./scripts/demo-host.sh

# ADD+DEL of a real VF against the kernel floor for the same VF, with CPU time, inside the emulated machine.
bench-vm: release bench-bins
	KERNEL=$(BENCH_KERNEL) ./tests/vm/run.sh bench $(or $(N),20)

# tests/layout.rs: no module imports one that imports it back.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --test layout

# Side-by-side ADD+DEL timings and CPU time on stand-in VFs, one at a time and 8 and 16 at once (root).
bench: deps release bench-bins
	./target/release/cni-bench $(or $(N),30)

# The device plugin at scale on a fake node (8 PFs x 127 VFs): start to first ListAndWatch, its size, idle CPU per
# minute (IDLE seconds, default 60, scaled to a minute), VmRSS, Allocate latency. Then where an idle daemon's CPU goes
# (the slow poll, the kubelet's probes at the DaemonSet's periods), schedstat ns and wake-ups per minute. OLD_DP=<another build of
# sriov-rdma-device-plugin> measures it too on the same node, with ratios (docs/benchmark.md says how the table
# there was made). Then the CNI's ADD by pfName on a PF of 1000 VFs of which 900 are taken (real ADDs), beside a PF
# with none taken, ADD and DEL medians of ROUNDS rounds (default 20) and ratios (tests/pool_scale.rs). Debug builds
# (cargo test's); the daemon part needs no root, the CNI part does (its own network namespace, veth stand-ins).
bench-scale:
	SRIOV_RDMA_DP_OLD_BIN=$(OLD_DP) SCALE_IDLE_SECONDS=$(or $(IDLE),60) \
		$(CARGO) test -p sriov-rdma-device-plugin --test scale -- --ignored --nocapture
	SCALE_ADD_ROUNDS=$(or $(ROUNDS),20) $(CARGO) test --test pool_scale -- --ignored --nocapture

# Mutation testing of the security paths (not in CI: a mutant is a rebuild and a test run, about a minute each on
# 2 cores): cargo-mutants changes one thing at a time in these files and says which changes no test noticed
# (MISSED). The unit tests and the root tests on real namespaces that reach these files; soak, crash and fuzz are
# left out (too slow per mutant). Root. One file: `make mutants MUTANTS_FILES=src/flow/del.rs`. cargo-mutants is
# installed from crates.io once (cargo's bin dir). Figures in docs/tests.md; the report goes to mutants.out/.
MUTANTS_FILES ?= src/policy.rs src/flow/admit.rs src/kernel/confined.rs src/kubelet.rs src/flow/pool.rs \
	src/flow/orphans.rs src/flow/journal.rs src/flow/del.rs
MUTANTS_TESTS ?= --lib --test netns --test orphans --test golden --test security --test kubelet --test doctor
mutants:
	command -v cargo-mutants >/dev/null || $(CARGO) install cargo-mutants --locked
	$(CARGO) mutants --copy-target=true --jobs 1 --timeout 180 $(addprefix --file ,$(MUTANTS_FILES)) -- $(MUTANTS_TESTS)

# Atomic (temp file + rename), so a node running ADDs never executes a half-written binary.
install: release
	install -d $(DESTDIR)$(PREFIX)
	./target/release/sriov-rdma install --cni-bin-dir $(DESTDIR)$(PREFIX)

clean:
	$(CARGO) clean
