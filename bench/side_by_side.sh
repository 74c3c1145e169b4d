#!/usr/bin/env bash
# Training speed, ropelab vs PyTorch eager, measured side by side on this machine with the
# same thread count, alternating the two so that both see the same machine state.
# Run by hand (not by CI) from the repository root:
#
#     PYTHON=.venv/bin/python bench/side_by_side.sh [ROUNDS] [THREADS]
#
# PYTHON must have torch and transformers (see bench/torch_reference.py). Prints the
# `N steps/s` line of each run for the paper preset (12 layers x 1 head, 17 tokens), for
# 4 layers x 4 heads with 48 random tokens, and for the model zoo's formal-language classifier
# and attention-only toy (bench/torch_zoo.py), then the median of each and their ratio.
set -euo pipefail
rounds=${1:-3}
threads=${2:-2}
python=${PYTHON:-python3}
cargo build --release --quiet
ropelab=target/release/ropelab
export RAYON_NUM_THREADS=$threads

rate() { grep -m1 'steps/s' | awk '{print $1}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

for shape in "" "--layers 4 --heads 4 --seq 48"; do
    name=${shape:-"paper preset"}
    ours=(); theirs=()
    for ((r = 1; r <= rounds; r++)); do
        # shellcheck disable=SC2086
        t=$("$python" bench/torch_reference.py --preset paper --threads "$threads" --steps 30 $shape | rate)
        # shellcheck disable=SC2086
        o=$("$ropelab" bench train --preset paper --steps 30 --no-peak $shape | rate)
        echo "$name, round $r: torch $t steps/s, ropelab $o steps/s"
        theirs+=("$t"); ours+=("$o")
    done
    mt=$(printf '%s\n' "${theirs[@]}" | median)
    mo=$(printf '%s\n' "${ours[@]}" | median)
    echo "$name: median torch $mt steps/s, ropelab $mo steps/s, ratio $(awk "BEGIN {printf \"%.2f\", $mo / $mt}")x"
done
for model in formal toy; do
    ours=(); theirs=()
    for ((r = 1; r <= rounds; r++)); do
        t=$("$python" bench/torch_zoo.py --model "$model" --threads "$threads" | rate)
        o=$("$ropelab" bench train --model "$model" --no-peak | rate)
        echo "$model, round $r: torch $t steps/s, ropelab $o steps/s"
        theirs+=("$t"); ours+=("$o")
    done
    mt=$(printf '%s\n' "${theirs[@]}" | median)
    mo=$(printf '%s\n' "${ours[@]}" | median)
    echo "$model: median torch $mt steps/s, ropelab $mo steps/s, ratio $(awk "BEGIN {printf \"%.2f\", $mo / $mt}")x"
done
# The peak alone (the fraction printed with it refers to a one-step run here).
"$ropelab" bench train --preset paper --steps 1 --warmup 0 | grep peak | cut -d';' -f1
