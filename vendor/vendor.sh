#!/usr/bin/env bash
# The vendored crates are the published crate and the patch files of vendor/patches/CRATE,
# nothing else: this script builds them so and checks that they are.
#
#   vendor/vendor.sh verify [CRATE...]   each vendor/CRATE equals its published version (the
#                                        version its Cargo.toml names, as cargo downloads it)
#                                        with vendor/patches/CRATE/*.patch applied in order;
#                                        exit 1 naming what differs (CI runs this)
#   vendor/vendor.sh apply CRATE [VER]   makes vendor/CRATE anew from the published VER (by
#                                        default the version it has) and its patches: moving
#                                        to a new release is this, then a rebuild; a patch
#                                        that no longer applies is named
#   vendor/vendor.sh self-test           verify must fail on a one-byte change: checked on a
#                                        scratch copy of each vendored tree
#
# A patch file is a unified diff against the published crate's root (patch -p1), its header
# saying why it is carried and where it stands upstream. Files that cargo's packaging and
# builds add (.cargo_vcs_info.json, .cargo-ok, Cargo.lock, target/) are not compared.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

crates() {
    local d
    for d in vendor/patches/*/; do
        basename "$d"
    done
}

version_of() {
    # The [package] version of a vendored tree: the first `version = "..."` line.
    sed -n 's/^version = "\([^"]*\)"$/\1/p' "vendor/$1/Cargo.toml" | head -1
}

# Unpacks the published CRATE VER into $work/published/CRATE-VER, downloaded by cargo.
published() {
    local crate=$1 ver=$2 fetch="$work/fetch-$1" file
    if [ ! -d "$work/published/$crate-$ver" ]; then
        mkdir -p "$fetch/src" "$work/published"
        printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s = "=%s"\n\n[workspace]\n' \
            "$crate" "$ver" >"$fetch/Cargo.toml"
        : >"$fetch/src/lib.rs"
        cargo fetch -q --manifest-path "$fetch/Cargo.toml" >&2
        file=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$crate-$ver.crate" 2>/dev/null | head -1)
        [ -n "$file" ] || { echo "vendor.sh: cargo did not download $crate $ver" >&2; exit 2; }
        tar -xzf "$file" -C "$work/published"
    fi
    echo "$work/published/$crate-$ver"
}

# Writes the published CRATE VER with its patches applied to $3.
build() {
    local crate=$1 ver=$2 out=$3 src p
    src=$(published "$crate" "$ver")
    rm -rf "$out"
    cp -r "$src" "$out"
    rm -f "$out/.cargo_vcs_info.json" "$out/.cargo-ok"
    for p in vendor/patches/"$crate"/*.patch; do
        [ -e "$p" ] || continue
        if ! patch -d "$out" -p1 -s --no-backup-if-mismatch -f <"$p" >"$work/patch.log" 2>&1; then
            echo "vendor.sh: $p does not apply to $crate $ver:" >&2
            cat "$work/patch.log" >&2
            return 1
        fi
    done
}

# Compares a built tree with a vendored one; prints what differs.
same() {
    diff -r -q --exclude=target --exclude=Cargo.lock --exclude=.cargo_vcs_info.json \
        --exclude=.cargo-ok "$1" "$2"
}

verify() {
    local crate=$1 tree=${2:-vendor/$1} ver
    ver=$(version_of "$crate")
    build "$crate" "$ver" "$work/built-$crate" || return 1
    if ! same "$work/built-$crate" "$tree" >"$work/diff.log"; then
        echo "vendor.sh: $tree is not $crate $ver as published plus vendor/patches/$crate:" >&2
        sed 's/^/  /' "$work/diff.log" >&2
        return 1
    fi
    echo "$crate $ver: published + $(ls vendor/patches/"$crate"/*.patch 2>/dev/null | wc -l) patches"
}

case "${1:-verify}" in
verify)
    shift || true
    failed=0
    for c in ${@:-$(crates)}; do
        verify "$c" || failed=1
    done
    exit $failed
    ;;
apply)
    crate=${2:?usage: vendor.sh apply CRATE [VERSION]}
    ver=${3:-$(version_of "$crate")}
    build "$crate" "$ver" "$work/built"
    rm -rf "vendor/$crate"
    cp -r "$work/built" "vendor/$crate"
    echo "vendor/$crate: $crate $ver as published + its patches; now rebuild and test"
    ;;
self-test)
    for c in $(crates); do
        cp -r "vendor/$c" "$work/scratch-$c"
        f=$(find "$work/scratch-$c/src" -name '*.rs' | sort | head -1)
        # One byte changed: the first character of the file's last line.
        python3 - "$f" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-2] = ord("X") if b[-2] != ord("X") else ord("Y")
open(p, "wb").write(bytes(b))
EOF
        if verify "$c" "$work/scratch-$c" >/dev/null 2>&1; then
            echo "vendor.sh self-test: a changed byte in $f went unseen" >&2
            exit 1
        fi
        echo "$c: a one-byte change is caught"
    done
    ;;
*)
    echo "usage: vendor/vendor.sh verify [CRATE...] | apply CRATE [VERSION] | self-test" >&2
    exit 2
    ;;
esac
