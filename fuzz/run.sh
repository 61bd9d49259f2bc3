#!/usr/bin/env bash
# Fuzzes each target for a number of seconds (default 60), starting from the committed
# seed corpus. Installs cargo-fuzz if it is missing. Usage: fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode_stream validate user_message)

# cargo-fuzz needs a nightly toolchain (sanitizers); without one every step below fails
# with an unhelpful message, so say so plainly first.
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "error: fuzzing needs a nightly Rust toolchain, and \`cargo +nightly --version\` failed." >&2
  echo "       Install one with \`rustup toolchain install nightly\` and run this again." >&2
  exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

for target in "${targets[@]}"; do
  # Findings and the grown corpus go to a scratch folder; the committed seeds stay as they are.
  work="corpus-work/$target"
  mkdir -p "$work" "artifacts/$target"
  echo "== fuzzing $target for ${seconds}s" >&2
  cargo +nightly fuzz run "$target" "$work" "corpus/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="artifacts/$target/"
done
