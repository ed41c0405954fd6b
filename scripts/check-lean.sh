#!/usr/bin/env bash
# Checks that the library stays lean: a throwaway program that depends only on the `fabcoll` library crate (by
# path, default features) must not pull the CLI's dependencies (clap, plotters, indicatif) and must compile at
# most $FABCOLL_LEAN_MAX (default 60) crates: the distinct name-version pairs of `cargo tree -e normal`, the
# throwaway program itself not counted. Prints the count. Resolves offline from the workspace's Cargo.lock when
# the registry cache has the crates (it has after any build of the workspace), else online.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
max=${FABCOLL_LEAN_MAX:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir "$tmp/src"
echo 'fn main() {}' >"$tmp/src/main.rs"
cat >"$tmp/Cargo.toml" <<EOF
[package]
name = "fabcoll-lean-check"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
fabcoll = { path = "$root" }

[workspace]
EOF
cp "$root/Cargo.lock" "$tmp/"

tree() { cargo tree --manifest-path "$tmp/Cargo.toml" -e normal --prefix none "$@"; }
tree --offline >"$tmp/tree.txt" 2>"$tmp/err.txt" || tree >"$tmp/tree.txt" 2>"$tmp/err.txt" || {
  cat "$tmp/err.txt" >&2
  exit 1
}
# "name vX.Y.Z (path) (*)" -> "name vX.Y.Z", once each.
sed -e 's/ (.*//' "$tmp/tree.txt" | grep -v '^fabcoll-lean-check ' | sort -u >"$tmp/crates.txt"
count=$(wc -l <"$tmp/crates.txt")

status=0
cli_only=$(grep -E '^(clap|plotters|indicatif) ' "$tmp/crates.txt" || true)
if [ -n "$cli_only" ]; then
  echo "check-lean: the library pulls CLI dependencies:" $cli_only >&2
  status=1
fi
if [ "$count" -gt "$max" ]; then
  echo "check-lean: the library pulls $count crates, more than $max:" >&2
  sed 's/^/  /' "$tmp/crates.txt" >&2
  status=1
fi
echo "check-lean: a program that depends on fabcoll compiles $count crates (at most $max)"
exit $status
