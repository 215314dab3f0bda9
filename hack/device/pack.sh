#!/usr/bin/env bash
# Builds what the issue-30 measurements run on a lent many-core machine, which
# has no Go toolchain, into bin/device/ (ignored by git), compressed so each
# bundle fits one `run` call's carry (64 MiB):
#   bin/device/eval       portal, 100,000 generated pods and the eval package's
#                         test binary, for BenchmarkJobsCeiling (about 25 MB);
#                         with PORTAL_DEVICE_BEFORE=<revision>, portal-before
#                         built at that revision (8 MB more)
#   bin/device/admission  the admission benchmark's test binary, kube-apiserver
#                         and etcd from bin/k8s (about 45 MB)
# Then, on the machine (see docs/performance.md, "On a lent many-core machine"):
#   hack/device/run.sh eval       # carry bin/device/eval
#   hack/device/run.sh admission  # carry bin/device/admission
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bin/device
pods=${PORTAL_EVAL_PODS:-100000}
rm -rf "$out" && mkdir -p "$out/eval" "$out/admission"
flags=(-trimpath -ldflags "-s -w")

# portal without `portal dev`'s embedded control plane: eval needs none of it.
go build "${flags[@]}" -tags portal_nodev -o "$out/eval/portal" ./cmd/portal
# PORTAL_DEVICE_BEFORE=<revision>: portal built at that revision too, which
# run.sh times beside this one in the same call.
if [ -n "${PORTAL_DEVICE_BEFORE:-}" ]; then
  before=$(mktemp -d)
  git worktree add -q --detach "$before" "$PORTAL_DEVICE_BEFORE"
  (cd "$before" && go build "${flags[@]}" -tags portal_nodev -o "$OLDPWD/$out/eval/portal-before" ./cmd/portal)
  git worktree remove --force "$before"
fi
# The pods BenchmarkEvalCLI times (one in ten failing the pod-security bundle).
if ! PORTAL_EVAL_BENCH_DIR=$PWD/$out/eval PORTAL_EVAL_BIN=$PWD/$out/eval/portal PORTAL_EVAL_PODS=$pods \
  PORTAL_EVAL_JOBS=1 go test -run '^$' -bench 'BenchmarkEvalCLI$' -benchtime 1x ./internal/eval/ >"$out/pods.log" 2>&1; then
  cat "$out/pods.log" >&2
  exit 1
fi
rm -f "$out/pods.log"
rm -f "$out/eval/report.json"
go test -c "${flags[@]}" -o "$out/eval/eval.test" ./internal/eval/

go test -c "${flags[@]}" -o "$out/admission/admission.test" ./test/bench/admission/
make -s bin/k8s/kube-apiserver bin/k8s/etcd >/dev/null
cp bin/k8s/kube-apiserver bin/k8s/etcd "$out/admission/"

xz -T0 -9 "$out"/eval/* "$out"/admission/*
du -sh "$out"/eval "$out"/admission
