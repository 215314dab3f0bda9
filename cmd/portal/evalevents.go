package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/runtime"
)

// runtimeHit is one runtime finding of `portal eval --events`, as -o json
// writes it (one JSON object a line).
type runtimeHit struct {
	Rule      string           `json:"rule"`
	Severity  core.Severity    `json:"severity"`
	Category  string           `json:"category,omitempty"`
	AuditID   string           `json:"auditID"`
	Time      time.Time        `json:"time"`
	User      string           `json:"user"`
	Verb      string           `json:"verb"`
	Object    core.ResourceRef `json:"object"`
	Message   string           `json:"message"`
	EventLine int              `json:"line"`
}

// runEvents replays a recorded audit log (JSON lines, as the API server's
// log backend writes it) through the runtime rules, as a live Portal with
// --runtime would: one evaluation per request, deduplicated per rule,
// actor and target over --runtime-dedup-window of the events' own time.
func (o *evalOptions) runEvents(cmd *cobra.Command, eng *engine.Engine, opts eval.Options) error {
	var hits []runtimeHit
	read, err := runtime.Replay(cmd.Context(), eng, opts.Cluster, o.events, o.dedupWindow, func(line int, ev *event.Event, r core.Result) {
		hits = append(hits, runtimeHit{Rule: r.Rule.MetricLabel(), Severity: r.Rule.Severity, Category: r.Rule.Category, AuditID: ev.AuditID, Time: ev.StageTimestamp,
			User: ev.User.Username, Verb: ev.Verb, Object: r.Resource, Message: r.Message, EventLine: line})
	})
	if err != nil {
		return usageError(fmt.Errorf("--events: %w", err))
	}
	if read == 0 && !o.allowEmpty {
		return usageError(fmt.Errorf("no audit event in --events %s (or pass --allow-empty)", o.events))
	}
	if err := writeHits(cmd.OutOrStdout(), o.output, hits); err != nil {
		return err
	}
	if len(hits) > 0 {
		return &exitError{code: exitViolation}
	}
	return nil
}

func writeHits(w io.Writer, format string, hits []runtimeHit) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		for _, h := range hits {
			if err := enc.Encode(h); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tRULE\tSEVERITY\tUSER\tVERB\tOBJECT\tMESSAGE")
	for _, h := range hits {
		obj := h.Object.Kind + " " + h.Object.Name
		if h.Object.Namespace != "" {
			obj = h.Object.Kind + " " + h.Object.Namespace + "/" + h.Object.Name
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", h.EventLine, h.Rule, h.Severity, h.User, h.Verb, obj, h.Message)
	}
	return tw.Flush()
}
