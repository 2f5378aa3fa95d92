PREFIX ?= /opt/cni/bin
CARGO ?= cargo

.PHONY: all build release test unit e2e lint bench bench-vm install demo demo-host deps clean

all: release

build:
	$(CARGO) build

release:
	$(CARGO) build --release

# Installs what the tests need (Debian): iproute2 and the reference IPAM plugins.
deps:
	./scripts/install-deps.sh

# The test command: lint, unit and real-netns integration tests, then the emulated SR-IOV machine (root).
test: unit e2e

# The soak, crash and fuzz tests run on their own line with --nocapture so their figures (cycles/s,
# seeds, trials, iterations) show; plain `cargo test` runs them with everything else.
LONG_TESTS = a_thousand_add_del_cycles_leak_nothing sigkill_at_random_moments mutated_configs_and_env

unit: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) test --all-targets -- --test-threads=4 $(addprefix --skip ,$(LONG_TESTS))
	$(CARGO) test --test soak --test crash --test fuzz -- --nocapture

# Real VFs: QEMU igb (SR-IOV) under Debian's 6.12 kernel; downloads are cached in .cache/vm.
e2e: release
	./tests/vm/run.sh e2e

# The main job: one VF (and an RDMA device) attached to a pod with cnitool on the emulated SR-IOV machine.
demo: deps release
	./tests/vm/run.sh demo

# The same flow on this host, with a veth standing in for the VF.
demo-host: deps release
	./scripts/demo-host.sh

# ADD+DEL of a real VF against the kernel floor for the same VF, inside the emulated machine.
bench-vm: release
	./tests/vm/run.sh bench $(or $(N),20)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

# Side-by-side ADD+DEL timings on a stand-in VF (root).
bench: deps release
	./target/release/cni-bench $(or $(N),30)

install: release
	install -d $(DESTDIR)$(PREFIX)
	install -m 0755 target/release/sriov-rdma $(DESTDIR)$(PREFIX)/sriov-rdma

clean:
	$(CARGO) clean
