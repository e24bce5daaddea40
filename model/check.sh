#!/usr/bin/env bash
# Checks the protocol model leases.pml with Spin: every assertion in every
# reachable state (safety), that the row is eventually finished under weak
# fairness (liveness, ltl "finished"), and that the broken variant, whose
# completion leaves the generation out of its guard, is caught. Exits
# non-zero when the model fails or the broken variant passes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v spin >/dev/null 2>&1; then
	echo "model: spin is not installed (Debian: apt-get install spin)" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/leases.pml" "$work/"
cd "$work"

# verify NAME EXPECT [spin -D flags...] -- [pan flags...]: generates and runs
# the verifier, prints its summary, and checks its error count.
verify() {
	local name=$1 expect=$2; shift 2
	local spinflags=() panflags=() gccflags=(-O2 -w)
	while [ $# -gt 0 ] && [ "$1" != -- ]; do spinflags+=("$1"); shift; done
	shift
	panflags=("$@")
	case " ${panflags[*]} " in
	*" -a "*) ;;
	*) gccflags+=(-DSAFETY -DNOCLAIM) ;;
	esac
	rm -f pan pan.* ./*.trail
	spin "${spinflags[@]}" -a leases.pml >/dev/null
	gcc "${gccflags[@]}" -o pan pan.c
	local out errors
	out=$(./pan -m100000 "${panflags[@]}" 2>&1) || true
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
	echo "--- $name"
	grep -E "assertion violated|acceptance cycle|errors:|states, stored|depth reached|elapsed time" <<<"$out" | sed 's/^/    /'
	if grep -q "Search not completed" <<<"$out" && [ "$expect" = 0 ]; then
		echo "model: $name: the search did not complete" >&2
		exit 1
	fi
	case "$expect" in
	0) [ "$errors" = 0 ] || { echo "model: $name: $errors errors, want none" >&2; spin "${spinflags[@]}" -t -p leases.pml | tail -40 >&2; exit 1; } ;;
	*) [ "${errors:-0}" != 0 ] || { echo "model: $name: no error found, want the broken guard caught" >&2; exit 1; } ;;
	esac
}

verify "safety: assertions and end states" 0 --
verify "liveness: ltl finished, weak fairness" 0 -- -a -f -N finished
verify "broken variant: completion without the generation in its guard" some -DBROKEN --
echo "    its counterexample, replayed:"
spin -DBROKEN -t leases.pml 2>&1 | grep -E "Error|failed assertion" | sed 's/^/    /'
echo "model: ok (the protocol holds; the broken variant is caught)"
