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

// WriterName makes a writer's name of any string (a prefix and a node name):
// a name over MaxNameLength is shortened, and one ending in "-" and digits
// gets a hash of the whole added, so that no writer's name is another's
// shard ("portal-runtime-cp-1" would be shard 1 of "portal-runtime-cp") and
// names that differ stay apart.
func WriterName(name string) string {
	if len(name) <= MaxNameLength && !endsInNumber(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-h" + hex.EncodeToString(sum[:])[:9]
	if len(name) > MaxNameLength-len(suffix) {
		name = strings.TrimRight(name[:MaxNameLength-len(suffix)], "-.")
	}
	return name + suffix
}

// endsInNumber reports whether name ends in "-" and digits, as shard names
// past the first do.
func endsInNumber(name string) bool {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return false
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
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
