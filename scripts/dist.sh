#!/usr/bin/env bash
# make dist: static (musl) binaries to copy to a machine under test, one tarball per
# architecture: <cargo target dir>/dist/ncdevmem-rs-VERSION-ARCH.tar.gz, holding
# ncdevmem-rs-VERSION-ARCH/{ncdevmem-rs, iou-zcrx -> ncdevmem-rs, py/, README}.
#
# The binaries are cargo's `dist` profile (the release build without debug info, stripped) for
# x86_64-unknown-linux-musl and aarch64-unknown-linux-musl: statically linked, so they run on
# any Linux of that architecture whatever its C library. Both are linked by the linker rustup
# ships with the toolchain (rust-lld for aarch64, .cargo/config.toml; the host's cc for
# x86_64), so no cross C toolchain is needed. The rustup targets are added when missing.
# The tarballs are reproducible for a given commit (sorted, owner 0, mtime of the commit).
#
# usage: scripts/dist.sh [ARCH...]      ARCH: x86_64, aarch64 (default both)
# env: CARGO (default cargo)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

log() { echo "dist: $*" >&2; }
die() { echo "dist: FAIL: $*" >&2; exit 1; }

archs=("$@")
((${#archs[@]})) || archs=(x86_64 aarch64)
for a in "${archs[@]}"; do
    case $a in x86_64 | aarch64) ;; *) die "unknown architecture '$a' (x86_64, aarch64)" ;; esac
done

# The rustup targets (the musl standard library, start files and libc for each).
sysroot=$(rustc --print sysroot) || die "no rustc"
need=()
for a in "${archs[@]}"; do
    [ -d "$sysroot/lib/rustlib/$a-unknown-linux-musl" ] || need+=("$a-unknown-linux-musl")
done
if ((${#need[@]})); then
    command -v rustup >/dev/null || die "the Rust standard library for ${need[*]} is missing" \
        "and there is no rustup to add it"
    log "rustup target add ${need[*]}"
    rustup target add "${need[@]}" || die "rustup target add ${need[*]} failed"
fi

target_dir=$(CARGO=$cargo scripts/target-dir.sh)
out=$target_dir/dist
mkdir -p "$out"
pkg_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
mtime=$(git log -1 --format=%ct 2>/dev/null) || mtime=0

for a in "${archs[@]}"; do
    triple=$a-unknown-linux-musl
    log "building $triple (cargo build --profile dist)"
    "$cargo" build -q --profile dist --locked --target "$triple" --bin ncdevmem-rs ||
        die "cargo build --profile dist --target $triple failed"
    bin=$target_dir/$triple/dist/ncdevmem-rs
    [ -x "$bin" ] || die "$bin was not built"
    name=ncdevmem-rs-$pkg_version-$a
    stage=$out/$name
    rm -rf "$stage"
    mkdir -p "$stage/py"
    install -m 0755 "$bin" "$stage/ncdevmem-rs"
    ln -s ncdevmem-rs "$stage/iou-zcrx"
    install -m 0644 py/*.py py/README.md "$stage/py/"
    # py/devmem.py looks for the binary beside itself.
    ln -s ../ncdevmem-rs "$stage/py/ncdevmem-rs"
    size=$(stat -c %s "$stage/ncdevmem-rs")
    # The version string the binary prints, read from it (the aarch64 one does not run here).
    version=$(grep -ao "$pkg_version (commit [0-9a-fdirtyunkow-]*, target $triple)" "$bin" |
        head -1) || true
    [ -n "$version" ] || version="$pkg_version ($triple)"
    sed -e "s|@VERSION@|$version|g" -e "s|@ARCH@|$a|g" -e "s|@NAME@|$name|g" \
        -e "s|@SIZE@|$size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }'))|g" \
        scripts/dist-README >"$stage/README"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
        -C "$out" -cf - "$name" | gzip -9n >"$out/$name.tar.gz.tmp"
    mv "$out/$name.tar.gz.tmp" "$out/$name.tar.gz"
    log "$out/$name.tar.gz: $(stat -c %s "$out/$name.tar.gz") bytes; ncdevmem-rs $size bytes"
done
