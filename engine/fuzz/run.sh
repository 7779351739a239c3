#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 10) and prints the runs libFuzzer reports;
# fails if any target crashes, panics, times out or runs out of memory.
#   engine/fuzz/run.sh [SECONDS]
# Needs cargo-fuzz (cargo install cargo-fuzz --locked --version 0.13.2); builds on stable
# (--sanitizer none). Each target starts from engine/fuzz/seeds/TARGET (committed; made by
# `cargo test --manifest-path engine/fuzz/Cargo.toml`) and its corpus, which grows in
# engine/fuzz/corpus/TARGET; crashes land in engine/fuzz/artifacts/TARGET (both ignored by git).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${1:-10}"
fuzz=(cargo fuzz)
flags=(--fuzz-dir engine/fuzz --sanitizer none)
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

echo "== cargo fuzz build (all targets)"
"${fuzz[@]}" build "${flags[@]}"

failed=()
printf '%-16s %12s  %s\n' target runs result
for target in $("${fuzz[@]}" list --fuzz-dir engine/fuzz); do
    log="$logs/$target.log"
    status=ok
    # -timeout: an input that runs longer than this many seconds counts as a failure.
    corpus=engine/fuzz/corpus/$target
    mkdir -p "$corpus"
    if ! "${fuzz[@]}" run "${flags[@]}" "$target" "$corpus" "engine/fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1; then
        status=FAILED
        failed+=("$target")
    fi
    runs="$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)"
    printf '%-16s %12s  %s\n' "$target" "${runs:--}" "$status"
    if [[ "$status" != ok ]]; then
        grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -20 || tail -30 "$log"
    fi
done

targets="$("${fuzz[@]}" list --fuzz-dir engine/fuzz | wc -l)"
echo "fuzz: $((targets - ${#failed[@]})) passed, ${#failed[@]} failed"
if ((${#failed[@]} > 0)); then
    echo "fuzz targets failed: ${failed[*]}" >&2
    exit 1
fi
