//go:build e2e

package flow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/hostcron/hostcron/workflows"
)

// createPhases are the steps of one create -> active, as the job
// workflow's history and the test's clock (the same host's) saw them:
// where the latency of a create goes.
var createPhases = []string{
	"dispatch",        // POST sent -> the job workflow started (commit, notify, dispatcher, signal-with-start)
	"first task",      // workflow started -> LoadJob scheduled
	"LoadJob",         // scheduled -> completed (core worker)
	"to ApplyJobs",    // LoadJob completed -> ApplyJobs scheduled (a workflow task)
	"nodes pick up",   // ApplyJobs scheduled -> the last node's attempt started
	"nodes apply",     // the last node started -> the last node completed
	"to SetJobStatus", // the last node completed -> SetJobStatus scheduled (a workflow task)
	// SetJobStatus scheduled -> the test's GET saw active: the activity
	// commits the status before its completion reaches the server, so a
	// GET may see it before the completion's event.
	"SetJobStatus, seen",
}

// phasesOf reads the job workflow's history of job id and splits the time
// from sent (the create request) to seen (the GET that saw it active)
// into createPhases. Only the first round of each activity counts (the
// ones one workflow task scheduled: ApplyJobs once per node); a retried
// node's later attempt shows in "nodes apply". A history without a step
// is an error, and nil (the job is left out of the phases).
func phasesOf(t *testing.T, id string, sent, seen time.Time) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.Temporal.GetWorkflowHistory(ctx, workflows.JobWorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var started time.Time
	round := map[string]int64{}  // activity type -> the workflow task that scheduled its first round
	first := map[int64]string{}  // scheduled event id of a first-round activity -> its type
	at := map[string]time.Time{} // "<activity> scheduled|started|completed" -> first scheduled, last started and completed
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Errorf("history of %s: %v", id, err)
			return nil
		}
		when := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			if started.IsZero() {
				started = when
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			name := a.GetActivityType().GetName()
			name = name[strings.LastIndex(name, ".")+1:]
			task, known := round[name]
			if !known {
				task = a.GetWorkflowTaskCompletedEventId()
				round[name] = task
				at[name+" scheduled"] = when
			}
			if task == a.GetWorkflowTaskCompletedEventId() {
				first[e.GetEventId()] = name
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if name, ok := first[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; ok {
				at[name+" started"] = when
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			if name, ok := first[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]; ok {
				at[name+" completed"] = when
			}
		}
	}
	marks := []time.Time{sent, started, at["LoadJob scheduled"], at["LoadJob completed"], at["ApplyJobs scheduled"],
		at["ApplyJobs started"], at["ApplyJobs completed"], at["SetJobStatus scheduled"], seen}
	out := make([]time.Duration, len(createPhases))
	for i := range out {
		if marks[i].IsZero() || marks[i+1].IsZero() {
			t.Errorf("history of %s lacks a step of create -> active (marks %v)", id, marks)
			return nil
		}
		out[i] = marks[i+1].Sub(marks[i])
	}
	return out
}

// printPhases prints the median and the maximum of each phase over the
// creates, and what the medians add up to.
func printPhases(t *testing.T, all [][]time.Duration) {
	t.Helper()
	var sum time.Duration
	for i, name := range createPhases {
		var col []time.Duration
		for _, p := range all {
			if p != nil {
				col = append(col, p[i])
			}
		}
		if len(col) == 0 {
			return
		}
		slices.Sort(col)
		p50, max := col[len(col)/2], col[len(col)-1]
		sum += p50
		t.Logf("create phase %-20s p50 %7.1f ms  max %7.1f ms", name, ms(p50), ms(max))
		fmt.Printf("BENCH create_phase name=%q p50_ms=%.1f max_ms=%.1f\n", name, ms(p50), ms(max))
	}
	t.Logf("create phases: the medians add up to %.1f ms", ms(sum))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
