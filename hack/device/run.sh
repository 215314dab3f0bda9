#!/usr/bin/env bash
# Runs the issue-30 measurements on a lent many-core machine from what
# hack/device/pack.sh built (carried as bin/device/eval or bin/device/admission),
# writing results under $OUT (the run tool's output folder; ./device-out when
# unset). One bundle per call:
#   eval       portal eval on 100,000 pods with 1 to 16 jobs, whole processes,
#              three rounds interleaved (each with portal-before too, where
#              the bundle holds one), the start-up cost (portal version and a
#              one-pod eval, twenty each), then a CPU profile and an execution
#              trace of the 16-job run, 16 jobs under other collector
#              settings, BenchmarkJobsCeiling at 2 to 16 cores (what N
#              one-job runs side by side reach in one process) and 1 to 16
#              whole one-job processes side by side; PORTAL_DEVICE_EVAL
#              names the parts to run (rounds startup profiles gc ceiling
#              processes, all by default), PORTAL_DEVICE_ROUNDS the rounds
#              (3 of the jobs, 2 of the processes), PORTAL_DEVICE_JOBS and
#              PORTAL_DEVICE_PROCESSES the counts
#   admission  BenchmarkAdmission, 4 clients and 1,000 creates, twice, and one
#              client once
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-}
case $what in
eval | admission) ;;
*)
  echo "usage: run.sh eval|admission (the bundle hack/device/pack.sh built and the call carries)" >&2
  exit 2
  ;;
esac
shopt -s nullglob
bundle=(bin/device/"$what"/*.xz)
if [ ${#bundle[@]} -eq 0 ]; then
  echo "run.sh: bin/device/$what holds nothing: run hack/device/pack.sh here and carry bin/device/$what" >&2
  exit 2
fi
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# xz where the machine has it, Python's lzma where it does not.
unxz() {
  if command -v xz >/dev/null; then
    xz -dc "$1"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"
  fi
}
for f in "${bundle[@]}"; do
  unxz "$f" >"$work/$(basename "$f" .xz)"
done
chmod +x "$work"/*
# The machine goes to the output, not a file: at most eight files come back.
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)"

case $what in
eval)
  rules=$PWD/examples/rules/pod-security
  rules=$rules/baseline,$rules/restricted
  # Wall, user and system seconds of one whole run, the report written to a
  # file as CI does. Exit 1 is the tenth of the pods that fail the bundle.
  # The last run's report is removed first, outside the time: the shell's
  # "> report.json" truncating a 644 MB report takes 0.2 to 0.3 s of kernel
  # time before portal starts, which is the shell's, not the run's (a fifth
  # of a 16-job run here on 2026-11-30). extra: environment assignments for
  # the next timed runs.
  extra=()
  timed() {
    local jobs=$1 rc=0
    shift
    rm -f "$work/report.json"
    TIMEFORMAT='%R	%U	%S'
    { time env "${extra[@]}" GOMAXPROCS="$jobs" "$work/$bin" eval -r "$rules" -f "$work/pods.yaml" -o json -j "$jobs" "$@" \
      >"$work/report.json" 2>"$work/stderr" || rc=$?; } 2>"$work/time"
    if [ "$rc" -ne 1 ]; then
      echo "portal eval -j $jobs: exit $rc" >&2
      cat "$work/stderr" >&2
      exit 1
    fi
    cat "$work/time"
  }
  # What the cores are: 16 threads on 8 cores would cap 16 jobs well
  # under 12x whatever the code does.
  if command -v lscpu >/dev/null; then
    lscpu | grep -E '^(Model name|Thread|Core|Socket|NUMA node\(s\)|CPU max MHz|L3)' || true
  else
    grep -m1 'model name' /proc/cpuinfo
    echo "threads of cpu0's core: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null)"
  fi
  # The binaries the rounds and the start-up time, alternated: portal, and
  # portal-before where the bundle holds one (PORTAL_DEVICE_BEFORE to
  # pack.sh) for a before and after in the same call. The other parts time
  # portal alone.
  bins=(portal)
  [ -e "$work/portal-before" ] && bins+=(portal-before)
  bin=portal
  # PORTAL_DEVICE_EVAL picks the parts, all by default.
  parts=${PORTAL_DEVICE_EVAL:-rounds startup profiles gc ceiling processes}
  part() { [[ " $parts " == *" $1 "* ]]; }
  if part rounds; then
    echo -e "round\tbinary\tjobs\twall_s\tuser_s\tsys_s" >"$out/eval.tsv"
    for round in $(seq "${PORTAL_DEVICE_ROUNDS:-3}"); do
      for bin in "${bins[@]}"; do
        for jobs in ${PORTAL_DEVICE_JOBS:-1 2 4 8 12 16}; do
          t=$(timed "$jobs")
          echo -e "$round\t$bin\t$jobs\t$t" >>"$out/eval.tsv"
        done
      done
    done
    bin=portal
  fi
  if part startup; then
    # What every run pays before its first pod and no job spreads: the
    # process (the runtime, every package's init) and loading the rules.
    # Twenty of each: portal version, then a one-pod eval.
    printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec:\n  containers: [{name: c, image: nginx}]\n' >"$work/one.yaml"
    echo -e "binary\twhat\twall_s\tuser_s\tsys_s" >"$out/startup.tsv"
    TIMEFORMAT=$'%R\t%U\t%S'
    for _ in $(seq 20); do
      for b in "${bins[@]}"; do
        { time "$work/$b" version >/dev/null; } 2>"$work/time"
        echo -e "$b\tversion\t$(cat "$work/time")" >>"$out/startup.tsv"
        { time "$work/$b" eval -r "$rules" -f "$work/one.yaml" -o json >/dev/null 2>&1 || true; } 2>"$work/time"
        echo -e "$b\tone-pod\t$(cat "$work/time")" >>"$out/startup.tsv"
      done
    done
  fi
  if part profiles; then
    timed 16 --profile cpu --profile-output "$out/eval-16-cpu.pprof" >/dev/null
    timed 16 --profile trace --profile-output "$out/eval-16.trace" >/dev/null
    timed 1 --profile cpu --profile-output "$out/eval-1-cpu.pprof" >/dev/null
    for p in eval-16-cpu.pprof eval-16.trace eval-1-cpu.pprof; do
      # A profile that could not be written is only a line on stderr of a
      # run that exits 1.
      [ -s "$out/$p" ] || { echo "run.sh: $p is empty:" >&2; cat "$work/stderr" >&2; exit 1; }
    done
    # A trace of 16 busy goroutines can pass the 16 MB a returned file may hold.
    if command -v gzip >/dev/null; then
      gzip -f "$out/eval-16.trace"
    else
      python3 -c 'import gzip, shutil, sys; o = gzip.open(sys.argv[1] + ".gz", "wb"); shutil.copyfileobj(open(sys.argv[1], "rb"), o); o.close()' "$out/eval-16.trace"
      rm "$out/eval-16.trace"
    fi
  fi
  if part gc; then
    # Whether the collector caps 16 jobs: portal eval's live heap is a few MB
    # while 16 jobs allocate gigabytes a second, so at GOGC=400 it collects
    # every few milliseconds. Its own account, then the same run with a
    # larger heap goal, and with none but a memory limit.
    extra=(GODEBUG=gctrace=1)
    timed 16 >/dev/null
    cp "$work/stderr" "$out/eval-16-gctrace.txt"
    echo -e "gc\tround\twall_s\tuser_s\tsys_s" >"$out/eval-gc.tsv"
    for gc in GOGC=400 GOGC=1600 "GOGC=off GOMEMLIMIT=1GiB"; do
      read -ra extra <<<"$gc"
      for round in 1 2; do
        t=$(timed 16)
        echo -e "$gc\t$round\t$t" >>"$out/eval-gc.tsv"
      done
    done
    extra=()
    cat "$out/eval-gc.tsv"
  fi
  if part ceiling; then
    # What N cores allow N jobs on this machine, read in the same rounds as
    # N jobs themselves (BenchmarkJobsCeiling; it finds the rules from its
    # package directory).
    (cd internal/eval && PORTAL_EVAL_PODS=${PORTAL_DEVICE_CEILING_PODS:-20000} "$work/eval.test" -test.run '^$' -test.bench '^BenchmarkJobsCeiling$' \
      -test.cpu 2,4,8,16 -test.benchtime 5x) >"$out/ceiling.txt" 2>&1 || { cat "$out/ceiling.txt" >&2; exit 1; }
    cat "$out/ceiling.txt"
  fi
  if part processes; then
    # What this machine gives N whole processes that share nothing: one
    # job's run alone, then N of them side by side, each on every pod and
    # with a report of its own. N times alone over side by side is the most
    # N jobs could reach here, the start and the collector included.
    echo -e "round\tprocesses\twall_s" >"$out/processes.tsv"
    for round in $(seq "${PORTAL_DEVICE_ROUNDS:-2}"); do
      for n in ${PORTAL_DEVICE_PROCESSES:-1 2 8 16}; do
        rm -f "$work"/report-*.json
        start=$EPOCHREALTIME
        pids=()
        for i in $(seq "$n"); do
          GOMAXPROCS=1 "$work/portal" eval -r "$rules" -f "$work/pods.yaml" -o json -j 1 >"$work/report-$i.json" 2>/dev/null &
          pids+=($!)
        done
        for pid in "${pids[@]}"; do
          rc=0
          wait "$pid" || rc=$?
          [ "$rc" -eq 1 ] || { echo "run.sh: a side-by-side portal eval exited $rc" >&2; exit 1; }
        done
        echo -e "$round\t$n\t$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')" >>"$out/processes.tsv"
      done
    done
    rm -f "$work"/report-*.json
    cat "$out/processes.tsv"
  fi
  if part rounds; then
    cat "$out/eval.tsv"
  fi
  ;;
admission)
  cd test/bench/admission
  export KUBEBUILDER_ASSETS=$work
  # The control plane wants a kubectl beside the API server; the benchmark
  # never runs it, and it would not fit the carry.
  if [ ! -e "$work/kubectl" ]; then
    printf '#!/bin/sh\necho "kubectl was not carried to this machine" >&2\nexit 1\n' >"$work/kubectl"
    chmod +x "$work/kubectl"
  fi
  rc=0
  for clients in ${PORTAL_DEVICE_CLIENTS:-4 4 1}; do
    echo "== $clients clients" >>"$out/admission.txt"
    PORTAL_BENCH_CLIENTS=$clients PORTAL_BENCH_PODS=${PORTAL_BENCH_PODS:-1000} "$work/admission.test" \
      -test.run '^$' -test.bench BenchmarkAdmission -test.benchtime 1x >>"$out/admission.txt" 2>&1 || rc=$?
  done
  tail -60 "$out/admission.txt"
  exit "$rc"
  ;;
esac
