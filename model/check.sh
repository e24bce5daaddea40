#!/usr/bin/env bash
# Checks the protocol model leases.pml with Spin, in two configurations: one
# row, and (-DKEYS) two rows of one key, with cancels. For each: every
# assertion in every reachable state (safety), and that every row is
# eventually finished for good (liveness, ltl "finished"; the one-row run
# without cancels). The liveness runs use no fairness: every step of the
# model spends a bounded budget, so it has no cycles and every run ends;
# Spin then checks the state each run ends in, where weak fairness (-f)
# would let a run that ends stuck pass unseen. Then each broken variant
# must be caught: completion without the generation in its guard, a cancel
# that releases the key at once, and a claim that leaves an expired
# cancelled row alone (stuck: the liveness check). Exits non-zero when the
# model fails or a broken variant passes.
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
# the verifier, prints its summary, and checks its error count; a broken
# variant's counterexample is replayed.
verify() {
	local name=$1 expect=$2; shift 2
	local spinflags=() panflags=() gccflags=(-O1 -w) # -O1: the compile costs more than -O2 saves
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
	*)
		[ "${errors:-0}" != 0 ] || { echo "model: $name: no error found, want the broken variant caught" >&2; exit 1; }
		echo "    its counterexample, replayed:"
		spin "${spinflags[@]}" -t leases.pml 2>&1 | grep -E "Error|failed assertion|START OF CYCLE" | sed 's/^/    /'
		;;
	esac
}

verify "safety, one row: assertions and end states" 0 --
verify "safety, two rows of one key: assertions and end states" 0 -DKEYS --
verify "liveness, one row without cancels: ltl finished, every run" 0 -DCANCELS=0 -- -a
verify "liveness, two rows of one key: ltl finished, every run" 0 -DKEYS -- -a
verify "broken variant: completion without the generation in its guard" some -DBROKEN --
verify "broken variant: a cancel releases the key at once" some -DKEYS -DBROKEN_CANCEL --
verify "broken variant: the claim leaves an expired cancelled row alone" some -DKEYS -DBROKEN_SETTLE -- -a
echo "model: ok (the protocol holds; each broken variant is caught)"
