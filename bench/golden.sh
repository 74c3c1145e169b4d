#!/usr/bin/env bash
# Byte-identity check for refactors, run by hand (not by CI): runs every file-writing command on
# tiny settings into DIR and prints one "sha256  path" line per file written, with wall-time
# fields, run-dependent paths and checksums of those files blanked, so two builds can be compared:
#
#   bench/golden.sh OLD_BINARY /tmp/old > old.txt
#   bench/golden.sh target/release/ropelab /tmp/new > new.txt
#   diff old.txt new.txt
#
# A file only one side writes shows as an added or removed line.
set -euo pipefail
bin="$(realpath "$1")"
out="$2"
rm -rf "$out"
mkdir -p "$out"
cd "$out"
r() { "$bin" "$@" >/dev/null 2>"stderr.txt" || { cat stderr.txt >&2; echo "failed: $*" >&2; exit 1; }; }

r gen number --n 20 --seed 3 --out gen-number.jsonl
r gen letter --n 20 --seed 3 --split test --extra 5 --out gen-letter.jsonl
r gen number --prompt --target-window 6 --n 3 --seed 1 --out gen-prompt.jsonl

r train --task number --preset tiny --steps 6 --save-every 3 --out number
r train --task letter --preset tiny --steps 6 --save-every 3 --engine composed --out letter
r train --task language --preset tiny --steps 4 --out language
r eval --run number --n 16 --extra 4
r lengthgen --run number --extras 0,8 --n 8
r mask --run number --n 8
r score --run number --samples 4
r score --run letter --samples 4 --query hops --out letter/scores-hops.jsonl
r attention --run number --sample 1
r theory discrepancy --mechanism index --theta 0.866 --max-n 40 --out theory-index.csv
r theory discrepancy --mechanism retrieval --theta 0.0027 --alphabet 8 --max-n 40 --out theory-retrieval.csv
r theory rope-stats --d 16 --bases 100,10000 --lengths 32,64 --draws 3 --out theory-rope.csv
r theory margins --run number --extras 0,8 --samples 4 --out theory-margins.csv
r theory periodic --m 2,3 --len 1000 --out theory-periodic.csv
r theory offset-range --g 1,0.5 --k 4 --scales 1,10 --out theory-offset-range.csv

r languages --lang 'ab-star,(aa)*' --pe rope-periodic,nope,rope:1 --steps 3 --per-length 2 \
  --test-lengths 41-43,60 --out languages
r canonical --task index --band sweep --window 4 --d-model 16 --len 8 --steps 5 --out canonical
r canonical --task partial --band all --band high --d-model 16 --len 8 --steps 5 --out canonical-partial
r offset --pe rope,ape,nope --attention softmax,linear --k 2 --seeds 0 --train-len 8 --steps 5 \
  --per-length 8 --out offset

cat > sweep.toml <<'EOF'
name = "golden"
preset = "tiny"
task = "number"
[base]
optim.steps = 6
data.train = 400
[[axis]]
key = "seed"
values = [0, 1]
EOF
r sweep sweep.toml --out sweep --jobs 2
r collect sweep

cat > study.toml <<'EOF'
name = "small"
seeds = [3]
[tasks]
train = 500
val = 20
test = 40
target_window = 8
pre_window = 8
hops = [1, 2, 3, 4]
[train]
preset = "tiny"
steps = 5
[score]
samples = 10
[lengthgen]
extras = [0, 20]
samples = 8
[theory]
max_n = 50
d = 8
bases = [100.0]
lengths = [64]
draws = 2
rho = 0.5
[offset]
pe = ["rope", "ape"]
attention = ["softmax"]
k = [1]
seeds = [0]
steps = 5
train_len = 4
test_lens = [4, 8, 16]
per_length = 8
[canonical]
tasks = ["partial", "index"]
bands = ["all"]
seeds = [0]
steps = 5
EOF
r reproduce --config study.toml --out study --no-pretrained --jobs 1
r collect study
r report number --out number-report.html
for kind in accuracy purity s-pos s-sym frequency length; do
  r plot "$kind" --dir number --out "plot-$kind.svg"
done
r plot seeds-number --dir study --out plot-seeds-number.svg
r plot discrepancy-index --dir study --out plot-discrepancy-index.svg
r plot offset-accuracy --dir offset --out plot-offset-accuracy.svg
r plot canonical-positions --dir canonical --out plot-canonical-positions.svg
r plot n-star --dir languages --out plot-n-star.svg
rm -f stderr.txt

# Blank what legitimately differs between two runs: wall times, rates, absolute paths, and the
# checksums/sizes that cover files holding those (metrics.jsonl, result.json, ...).
normalise() {
  sed -E \
    -e "s#$out#OUT#g" \
    -e 's/"[a-z_]*(seconds|_s|elapsed|per_s|rss[a-z_]*|sha256|bytes|created|time)"(: *)[^,}]*/"\1"\2X/g' \
    -e 's/[0-9]+(\.[0-9]+)? ?(s|ms|steps\/s|tokens\/s)\b/T/g' \
    "$1"
}
# CSV columns named like a wall time (a header containing "seconds").
blank_time_columns() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /seconds/) t[i] = 1 }
           { for (i in t) if (NR > 1) $i = "X"; print }' OFS=,
}
find . -type f ! -name '*.lock' ! -name '.ropelab.lock' | LC_ALL=C sort | while read -r f; do
  case "$f" in
    *.csv) printf '%s  %s\n' "$(normalise "$f" | blank_time_columns | sha256sum | cut -c1-64)" "$f" ;;
    *.safetensors) printf '%s  %s\n' "$(sha256sum < "$f" | cut -c1-64)" "$f" ;;
    *) printf '%s  %s\n' "$(normalise "$f" | sha256sum | cut -c1-64)" "$f" ;;
  esac
done
