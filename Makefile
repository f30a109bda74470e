# ncdevmem-rs — build, test, install, demo.
# kselftest-style variables: INSTALL_PATH (install destination), CARGO (cargo binary).

CARGO ?= cargo
PYTHON ?= python3
INSTALL_PATH ?= /usr/local/bin
export CARGO
# Real-kernel tests (tests/kernel_*.rs, tests/e2e.rs) fail instead of skipping when they cannot
# run while this is 1: the default as root, where every one of them must run.
export NCDEVMEM_REQUIRE_REAL_KERNEL_TESTS ?= $(if $(filter 0,$(shell id -u)),1,0)
# cargo's own target directory (CARGO_TARGET_DIR, build.target-dir or ./target), asked once
# and only by the targets that need it.
TARGET_DIR = $(eval TARGET_DIR := $(or $(shell scripts/target-dir.sh),$(error cannot find cargo's target directory (scripts/target-dir.sh))))$(TARGET_DIR)
BIN = $(TARGET_DIR)/release/ncdevmem-rs
# make dist's static x86_64 binary (scripts/dist.sh).
PKG_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DIST_BIN = $(TARGET_DIR)/dist/ncdevmem-rs-$(PKG_VERSION)-x86_64/ncdevmem-rs
# The VM suite's core cases that make vm-test-dist runs with that binary.
VM_DIST_CASES = =devmem-nic/probe,=devmem-nic/rx,=devmem-nic/multi-flow,=devmem-nic/tx,=devmem-nic/zcrx,=devmem-nic/kernel-devmem-py

.PHONY: all build test test-loaded lint unit simd-calls scripts-test test-tools pytest vm-test vm-test-opt-in vm-shell demo demo-sweep bench install clean \
	dist dist-test vm-test-dist

all: build

# Also `iou-zcrx` beside the binary: a link under which it takes the kernel's iou-zcrx
# selftest's command line (src/personality).
build:
	$(CARGO) build --release --locked
	ln -sfn ncdevmem-rs $(TARGET_DIR)/release/iou-zcrx

# The README's test command: formatting, lints, then every test (unit, scripted-kernel,
# real-kernel in network namespaces, the shell helpers, the py/ harness; the real-kernel ones
# need root and say so when skipped), the release binary's validator builds (simd-calls),
# then the VM suite, and last the static binaries of make dist: checked, the aarch64 one
# under qemu-user, the x86_64 one through the VM suite's core cases (run from the recipe so
# they stay last under make -j). The VM suite reuses what unit and build compiled.
test: lint unit scripts-test pytest simd-calls
	$(MAKE) vm-test
	$(MAKE) dist-test
	$(MAKE) vm-test-dist

# make test on a loaded machine: busy loops beside it (BUSY of them, default the CPUs + 1; or
# LOAD=N: as many as hold the load average at N or more, BUSY the fewest), the load average recorded at the start, every minute and at the end (scripts/test-loaded.sh).
# TEST_LOADED=TARGETS runs those instead of test (e.g. TEST_LOADED='test vm-test-opt-in', what
# .ci/run runs); TEST_LOADED=--ci runs .ci/run itself. Intermittent failures and their fixes: tests/vm/FLAKES.md.
TEST_LOADED ?= test
test-loaded:
	MAKE="$(MAKE)" scripts/test-loaded.sh $(TEST_LOADED)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --locked
	$(CARGO) test --locked --test layers

unit:
	$(CARGO) test --locked --all-targets
	$(CARGO) test --locked --doc

# The validator's AVX2 and AVX-512 builds in the release binary call nothing but panics: a
# generic helper LLVM leaves out of line there runs without AVX2 (scripts/simd-calls.py).
simd-calls: build
	$(PYTHON) scripts/simd-calls.py $(BIN)

# Tests of the shell helpers the VM suite uses (Debian mirror from the apt configuration, cache
# location, console filter).
scripts-test:
	tests/vm/lib-test.sh

# pytest, socat and ip for the py/ harness tests: installed when missing (as root), else a
# failure that names them; a suite is never skipped silently.
test-tools:
	PYTHON="$(PYTHON)" scripts/install-test-tools.sh

# Real-kernel suite in a QEMU guest with the newest trixie-backports kernel (root; installs
# qemu, fetches the kernel into the per-user VM cache, builds netdevsim): udmabuf, dma-buf
# sync, bind-rx refusals, netdevsim rings/channels, namespace transfers. See tests/vm/run.sh.
# KERNEL_TREE=DIR: boot that built kernel tree instead, with its modules and its selftests
# (README, "Test a devmem kernel change without a NIC").
vm-test:
	tests/vm/run.sh $(if $(KERNEL_TREE),--kernel-tree "$(KERNEL_TREE)")

# The VM suite's slow opt-in cases, which vm-test skips to keep make test near 20 minutes: the
# kernel's netkit tests (nk_devmem.py, userns_devmem.py, nk_qlease.py), the C iou-zcrx beside
# ours, the kernel's drv-net tests as the software NIC's judge, and byo-kernel (the KERNEL_TREE
# path with Debian's kernel laid out as a tree). .ci/run runs it after make test.
vm-test-opt-in:
	NCDEVMEM_VM_ONLY=opt-in tests/vm/run.sh

# The VM suite's guest without its cases: the software devmem NIC loaded, pair 0 made (dnic0a,
# dnic0b in netns dnic0peer), an interactive shell on the console; or, with CMD, that command
# run there (make vm-shell CMD='ip link; ncdevmem-rs -f dnic0a'), its exit status the target's.
# CMD is passed verbatim ($(value CMD): make expands nothing in it, so '$$?' and '$$HOME' reach
# the guest's shell as typed). KERNEL_TREE=DIR boots your own kernel tree as vm-test does.
# tests/vm/run.sh --shell (it builds only ncdevmem-rs and the guest program, no test binary).
vm-shell:
	tests/vm/run.sh $(if $(KERNEL_TREE),--kernel-tree "$(KERNEL_TREE)") --shell $(if $(value CMD),'$(subst ','\'',$(value CMD))')

# The py/ harness tests: devmem.py run stand-alone against a namespace + veth "remote" (needs
# root; skipped with the reason otherwise).
pytest: build test-tools
	NCDEVMEM=$(BIN) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -rs -p no:cacheprovider py/tests

# Loopback demo: two network namespaces joined by a veth pair, a 1 GiB transfer of the keyed
# stream (--seed) validated byte for byte by the plain-TCP receiver; namespaces removed afterwards.
demo: build
	scripts/demo-loopback.sh $(BIN)

# Sweep demo: the lab over two network namespaces joined by a veth pair: the peer server, a
# plain-TCP sweep (flows=1,2, 3 runs of 2 s) twice, each table with its JSON and PNG, and
# --compare of the two (scripts/demo-sweep.sh; files in <target dir>/demo-sweep).
demo-sweep: build
	scripts/demo-sweep.sh $(BIN)

# Benchmarks (docs/benchmarks.md): the validator and the sender's fill against a plain read
# and memset of the same bytes, side by side per instruction-set build (benches/ratios.rs);
# the hot-path groups (criterion: validators, the receive loop, zcrx consumer and TX path over
# 1 GiB against a plain read); then end to end against iperf3 over a veth pair
# (scripts/bench-e2e.py: root; iperf3 installed with apt when missing; said and left out when
# not root).
bench: simd-calls
	$(CARGO) bench --locked --bench ratios
	$(CARGO) bench --locked --bench hot_path
	@if [ "$$(id -u)" = 0 ]; then \
		command -v iperf3 >/dev/null 2>&1 || { echo "bench: installing iperf3" >&2; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				-o DPkg::Lock::Timeout=300 iperf3 >/dev/null; } && \
		$(PYTHON) scripts/bench-e2e.py --bin $(BIN); \
	else echo "bench: scripts/bench-e2e.py left out: it needs root (network namespaces)"; fi

# Static (musl) x86_64 and aarch64 binaries, stripped, each beside its iou-zcrx link, with the
# py/ harness and a README, one tarball per architecture:
# <target dir>/dist/ncdevmem-rs-VERSION-ARCH.tar.gz (scripts/dist.sh; adds the rustup targets
# when missing; README, "Install on a machine under test").
dist:
	scripts/dist.sh

# make dist's tarballs checked, and its aarch64 binary run under qemu user-mode emulation next
# to the x86_64 one: --help, bad command lines' exit codes, a 256 MiB keyed-stream transfer
# over loopback, fault cells, the validator's unit tests (scripts/dist-test.sh; as root it
# installs qemu-user-static and the aarch64 cross C compiler when missing).
dist-test: dist
	scripts/dist-test.sh

# The VM suite's core cases (VM_DIST_CASES) with make dist's static x86_64 binary as the tool
# under test instead of the release build (tests/vm/run.sh, NCDEVMEM_VM_BIN).
vm-test-dist: dist
	NCDEVMEM_VM_BIN=$(DIST_BIN) NCDEVMEM_VM_ONLY=$(VM_DIST_CASES) tests/vm/run.sh

install: build
	install -D -m 0755 $(BIN) $(INSTALL_PATH)/ncdevmem-rs
	ln -sfn ncdevmem-rs $(INSTALL_PATH)/iou-zcrx

clean:
	$(CARGO) clean
