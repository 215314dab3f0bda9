//go:build tools

// Package tools pins the Alertmanager the audit tests send alerts to. Its
// command is built straight from the module, with this module's graph:
//
//	go build -o ../../../bin/alertmanager github.com/prometheus/alertmanager/cmd/alertmanager
package tools

import (
	_ "github.com/prometheus/alertmanager/cmd/alertmanager"
)
