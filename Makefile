# ncdevmem-rs — build, test, install, demo.
# kselftest-style variables: INSTALL_PATH (install destination), CARGO (cargo binary).

CARGO ?= cargo
PYTHON ?= python3
INSTALL_PATH ?= /usr/local/bin
BIN := target/release/ncdevmem-rs

.PHONY: all build test lint unit pytest vm-test demo bench install clean

all: build

build:
	$(CARGO) build --release --locked

# The README's test command: formatting, lints, then every test (unit, scripted-kernel,
# real-kernel in network namespaces, the py/ harness; the real-kernel ones need root and say
# so when skipped), and last the VM suite (run from the recipe so it stays last under make -j).
test: lint unit pytest
	$(MAKE) vm-test

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

unit:
	$(CARGO) test --locked --all-targets

# Real-kernel suite in a QEMU guest with the newest trixie-backports kernel (root; installs
# qemu, fetches the kernel into .cache/vm, builds netdevsim): udmabuf, dma-buf sync, bind-rx
# refusals, netdevsim rings/channels, namespace transfers. See tests/vm/run.sh.
vm-test:
	CARGO="$(CARGO)" tests/vm/run.sh

# The py/ harness tests: devmem.py run stand-alone against a namespace + veth "remote" (needs
# root; skipped with the reason otherwise). Without the pytest module this target says so and
# passes (.ci/run installs it).
pytest: build
	@if $(PYTHON) -c 'import pytest' 2>/dev/null; then \
		NCDEVMEM=$(CURDIR)/$(BIN) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider py/tests; \
	else \
		echo "skip: pytest: the $(PYTHON) module pytest is not installed ($(PYTHON) -m pip install pytest)"; \
	fi

# Loopback demo: two network namespaces joined by a veth pair, a 1 GiB pattern transfer
# validated byte for byte by the plain-TCP receiver; namespaces removed afterwards.
demo: build
	scripts/demo-loopback.sh $(BIN)

# Hot-path benchmarks (criterion); figures and reading guide in docs/benchmarks.md.
bench:
	$(CARGO) bench --locked --bench hot_path

install: build
	install -D -m 0755 $(BIN) $(INSTALL_PATH)/ncdevmem-rs

clean:
	$(CARGO) clean
