# Sourced by the bench scripts: find_xsent ROOT sets $xsent to XSENT_BIN, else the release binary
# under CARGO_TARGET_DIR (or ROOT/target), building it with `cargo build --release` if missing.
# Uses the caller's say/die.
find_xsent() {
    local root="$1"
    if [ -n "${XSENT_BIN:-}" ]; then
        xsent="$XSENT_BIN"
        [ -x "$xsent" ] || die "XSENT_BIN=$xsent is not an executable"
        return
    fi
    xsent="${CARGO_TARGET_DIR:-$root/target}/release/xsent"
    if [ ! -x "$xsent" ]; then
        say "building xsent (cargo build --release)"
        (cd "$root" && cargo build --release) >&2
        [ -x "$xsent" ] || die "no binary at $xsent after cargo build --release"
    fi
}
