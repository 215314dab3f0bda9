package policyreport

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxNameLength bounds a writer's name (Options.Name): it is the value of
// the LabelWriter label.
const MaxNameLength = validation.LabelValueMaxLength

// CheckName reports whether name can name a writer's reports.
func CheckName(name string) error {
	if len(name) > MaxNameLength {
		return fmt.Errorf("report name %q: at most %d characters", name, MaxNameLength)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("report name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// WriterName shortens a name longer than MaxNameLength to a prefix and a
// hash of the whole, so that a name made of parts of any length (a prefix
// and a node name) stays distinct and usable.
func WriterName(name string) string {
	if len(name) <= MaxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	prefix := strings.TrimRight(name[:MaxNameLength-11], "-.")
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// names are the report names of one writer: base for shard 0, base-i for
// shard i, each labelled LabelWriter=base.
type names string

// report names shard i.
func (n names) report(i int) string {
	if i == 0 {
		return string(n)
	}
	return string(n) + "-" + strconv.Itoa(i)
}

// shardOf returns the shard number of a report this writer wrote, from its
// labels. Another writer's reports are not its own, even where a name
// could be both ("portal-runtime-cp-1" is shard 1 of "portal-runtime-cp"):
// the writer label decides. Reports written before the label existed, all
// by the default writer, have none.
func (n names) shardOf(u *unstructured.Unstructured) (int, bool) {
	labels := u.GetLabels()
	if w, ok := labels[LabelWriter]; ok && w != string(n) || !ok && n != ReportName {
		return 0, false
	}
	i, err := strconv.Atoi(labels[LabelShard])
	if err != nil || i < 0 || i >= MaxShards || n.report(i) != u.GetName() {
		return 0, false
	}
	return i, true
}
