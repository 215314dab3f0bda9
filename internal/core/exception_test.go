package core

import "testing"

// TestExceptionAppliesIn: no modes means every loop; an offline evaluation
// (no mode) is skipped by every exception but one of mode actions alone,
// which only keeps actions off and must leave the violation visible.
func TestExceptionAppliesIn(t *testing.T) {
	for _, tc := range []struct {
		modes []Mode
		m     Mode
		want  bool
	}{
		{nil, ModeAdmission, true},
		{nil, "", true},
		{[]Mode{ModeAdmission}, ModeAudit, false},
		{[]Mode{ModeAdmission}, "", true},
		{[]Mode{ModeActions}, "", false},
		{[]Mode{ModeActions}, ModeAudit, false},
		{[]Mode{ModeActions, ModeAudit}, ModeAudit, true},
	} {
		x := &Exception{Modes: tc.modes}
		if got := x.AppliesIn(tc.m); got != tc.want {
			t.Errorf("modes %v in %q: %v, want %v", tc.modes, tc.m, got, tc.want)
		}
	}
}
