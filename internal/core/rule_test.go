package core

import "testing"

// TestAlertName: the alert shorthand wins; else the first alertmanager
// action's template names the rule's alerts.
func TestAlertName(t *testing.T) {
	am := func(tpl string) ActionSpec {
		return ActionSpec{Type: "alertmanager", Params: map[string]string{"template": tpl}}
	}
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{}, ""},
		{Rule{Alert: "Short"}, "Short"},
		{Rule{Actions: []ActionSpec{{Type: "label"}, am("FromAction")}}, "FromAction"},
		{Rule{Alert: "Short", Actions: []ActionSpec{am("FromAction")}}, "Short"},
	} {
		if got := tc.rule.AlertName(); got != tc.want {
			t.Errorf("%+v: AlertName() = %q, want %q", tc.rule, got, tc.want)
		}
	}
}
