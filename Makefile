# ncdevmem-rs — build, test, install, demo.
# kselftest-style variables: INSTALL_PATH (install destination), CARGO (cargo binary).

CARGO ?= cargo
INSTALL_PATH ?= /usr/local/bin
BIN := target/release/ncdevmem-rs

.PHONY: all build test lint unit demo bench install clean

all: build

build:
	$(CARGO) build --release --locked

# The README's test command: formatting, lints, then every test (unit, scripted-kernel,
# real-kernel in network namespaces; the real-kernel ones need root and say so when skipped).
test: lint unit

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

unit:
	$(CARGO) test --locked --all-targets

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
