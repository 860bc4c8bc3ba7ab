package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// listRuns answers a page of a job's runs, newest slot first, with the
// cursor of the next page (null on the last). A deleted job's runs stay
// listed for the run retention (none is running: its starts went with it).
func (s *Server) listRuns(c echo.Context) error {
	jobID, _, err := s.historyInScope(c)
	if err != nil {
		return err
	}
	q, err := runQuery(c)
	if err != nil {
		return err
	}
	items := []any{}
	if q.Before == nil { // runs in progress head the first page
		running, err := s.store.RunningRuns(c.Request().Context(), jobID)
		if err != nil {
			return err
		}
		for _, r := range running {
			if q.WantsRunning(r.Trigger, r.ScheduledAt) {
				items = append(items, r)
			}
		}
	}
	if q.OnlyRunning() {
		return c.JSON(http.StatusOK, map[string]any{"runs": items, "next_cursor": nil})
	}
	runs, next, err := s.store.PageRuns(c.Request().Context(), jobID, q)
	if err != nil {
		return err
	}
	for _, r := range runs {
		items = append(items, r)
	}
	var cursor *string
	if next != nil {
		c := encodeRunCursor(*next)
		cursor = &c
	}
	return c.JSON(http.StatusOK, map[string]any{"runs": items, "next_cursor": cursor})
}

// runQuery reads the runs listing's limit, cursor and filters: result and
// trigger (comma-separated lists), from and to (RFC 3339; the slot in
// [from, to)).
func runQuery(c echo.Context) (store.RunQuery, error) {
	var q store.RunQuery
	var err error
	if q.Limit, err = intParam(c, "limit", 100, 1, 1000); err != nil {
		return q, err
	}
	if cur := c.QueryParam("cursor"); cur != "" {
		pos, ok := decodeRunCursor(cur)
		if !ok {
			return q, invalid("cursor", "not a cursor of this listing (pass next_cursor as given)")
		}
		q.Before = &pos
	}
	if q.Results, err = listParam(c, "result", append(append([]wire.Result(nil), wire.Results...), store.ResultRunning)); err != nil {
		return q, err
	}
	if q.Triggers, err = listParam(c, "trigger", wire.Triggers); err != nil {
		return q, err
	}
	if q.From, err = timeParam(c, "from"); err != nil {
		return q, err
	}
	if q.To, err = timeParam(c, "to"); err != nil {
		return q, err
	}
	if q.From != nil && q.To != nil && !q.From.Before(*q.To) {
		return q, invalid("to", "must be after from")
	}
	return q, nil
}

// timeParam reads an optional RFC 3339 query parameter.
func timeParam(c echo.Context, name string) (*time.Time, error) {
	v := c.QueryParam(name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, invalid(name, "must be an RFC 3339 time, e.g. 2026-11-21T12:00:00Z")
	}
	t = t.UTC()
	return &t, nil
}

// queuedRun is a run-now request no node has reported yet.
type queuedRun struct {
	RunKey      string       `json:"run_key"`
	CronJobID   string       `json:"cron_job_id"`
	Result      string       `json:"result"` // "queued"
	Trigger     wire.Trigger `json:"trigger"`
	Attempt     int          `json:"attempt"`
	RequestedAt time.Time    `json:"requested_at"`
}

// getRun answers one run of a job, named by its record id or its run key
// (percent-encoded: the key holds '#'). A run-now request of the job that
// has no record yet answers result "queued" while the request is known
// and the job is not deleted (a deleted job runs nothing more). A deleted
// job's runs answer as a live job's for the run retention.
func (s *Server) getRun(c echo.Context) error {
	jobID, deleted, err := s.historyInScope(c)
	if err != nil {
		return err
	}
	id, key, ok := runRef(jobID, c.Param("run"))
	if !ok {
		return errNotFound
	}
	ctx := c.Request().Context()
	run, err := s.store.GetRun(ctx, jobID, id, key.String())
	if err == nil {
		// A placeholder (a skip, another node's platform error, lost) may
		// stand while the node that runs the slot still runs it.
		if store.IsPlaceholder(run.Result) {
			if rr, ok, rerr := s.runningRun(ctx, jobID, run.RunKey); rerr == nil && ok {
				return c.JSON(http.StatusOK, rr)
			}
		}
		return c.JSON(http.StatusOK, run)
	}
	if id != 0 {
		return err
	}
	if rr, ok, rerr := s.runningRun(ctx, jobID, key.String()); rerr != nil || ok {
		if rerr != nil {
			return rerr
		}
		return c.JSON(http.StatusOK, rr)
	}
	if !key.ByRequest() || deleted {
		return err
	}
	at, known, qerr := s.store.RunNowRequested(ctx, jobID, key)
	switch {
	case qerr != nil:
		return qerr
	case !known:
		return err // not found
	}
	// The record may have landed between the two reads.
	if run, err := s.store.GetRun(ctx, jobID, 0, key.String()); err == nil {
		return c.JSON(http.StatusOK, run)
	}
	return c.JSON(http.StatusOK, queuedRun{RunKey: key.String(), CronJobID: jobID, Result: "queued",
		Trigger: key.Trigger, Attempt: key.AttemptNumber(), RequestedAt: at})
}

// runningRun is the run in progress under key, if a node reported it.
func (s *Server) runningRun(ctx context.Context, jobID, key string) (store.RunningRun, bool, error) {
	running, err := s.store.RunningRuns(ctx, jobID)
	if err != nil {
		return store.RunningRun{}, false, err
	}
	for _, r := range running {
		if r.RunKey == key {
			return r, true, nil
		}
	}
	return store.RunningRun{}, false, nil
}

// runRef reads the {run} path parameter of job jobID: a record id (digits)
// or a run key of that job. ok is false for anything else, which cannot
// name one of its runs.
func runRef(jobID, param string) (id int64, key runkey.Key, ok bool) {
	raw, err := url.PathUnescape(param)
	if err != nil || raw == "" {
		return 0, key, false
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		if n < 1 || strconv.FormatInt(n, 10) != raw {
			return 0, key, false
		}
		return n, key, true
	}
	key, err = runkey.Parse(raw)
	if err != nil || key.JobID != jobID {
		return 0, runkey.Key{}, false
	}
	return 0, key, true
}

// runPath is the API path of a job's run.
func runPath(jobID, runKey string) string {
	return "/api/v1/cron-jobs/" + jobID + "/runs/" + url.PathEscape(runKey)
}

// runNowResponse is the job and the key of the run a run-now queued.
type runNowResponse struct {
	jobResponse
	RunKey string `json:"run_key"`
}

// runNowRequest is the optional body of run-now: a past slot to re-run
// (a backfill).
type runNowRequest struct {
	Slot *string `json:"slot"`
}

// runNow queues one run and answers 202 with its key and, as Location,
// the run (queued until a node reports it). With a slot it re-runs that
// past slot of the schedule (trigger backfill).
func (s *Server) runNow(c echo.Context) error {
	j, ifVersion, err := s.jobToChange(c)
	if err != nil {
		return err
	}
	var req runNowRequest
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	var job store.CronJob
	var key string
	if req.Slot == nil {
		var request string
		job, request, err = s.store.RunNow(c.Request().Context(), j.ID, ifVersion)
		key = runkey.Manual(job.ID, request)
	} else {
		slot, perr := time.Parse(time.RFC3339, *req.Slot)
		if perr != nil {
			return invalid("slot", "must be an RFC 3339 time, e.g. 2026-11-21T12:00:00Z")
		}
		job, key, err = s.store.Backfill(c.Request().Context(), j.ID, ifVersion, slot.UTC())
	}
	if errors.Is(err, store.ErrInvalidSlot) {
		return invalid("slot", "%s", strings.TrimSuffix(err.Error(), ": "+store.ErrInvalidSlot.Error()))
	}
	if err != nil {
		return jobError(err)
	}
	c.Response().Header().Set("Location", runPath(job.ID, key))
	setETag(c, job)
	return c.JSON(http.StatusAccepted, runNowResponse{jobResponse: s.withNext(job), RunKey: key})
}

// MaxDisableReasonChars bounds a disable's reason.
const MaxDisableReasonChars = 500

// disableRequest is the optional body of disable.
type disableRequest struct {
	Reason *string `json:"reason"`
}

// disableJob disables a job, with an optional reason kept on it until it
// is enabled again. No body (or an empty one) is a disable without reason.
func (s *Server) disableJob(c echo.Context) error {
	j, ifVersion, err := s.jobToChange(c)
	if err != nil {
		return err
	}
	var req disableRequest
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	reason := ""
	if req.Reason != nil {
		if err := checkText("reason", *req.Reason, MaxDisableReasonChars); err != nil {
			return err
		}
		reason = *req.Reason
	}
	changed, err := s.store.DisableJobFor(c.Request().Context(), j.ID, ifVersion, reason)
	if err != nil {
		return jobError(err)
	}
	return s.respondJob(c, http.StatusAccepted, changed)
}

// decodeOptional is decodeStrict for a body that may be absent or empty.
func decodeOptional(c echo.Context, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxJSONBody))
	if err != nil {
		return invalid("body", "larger than %d bytes", maxJSONBody)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	c.Request().Body = io.NopCloser(bytes.NewReader(b))
	return decodeStrict(c, v)
}

// cancelAccepted answers a cancel: the request is stored, the nodes act.
type cancelAccepted struct {
	RunKey    string `json:"run_key"`
	CronJobID string `json:"cron_job_id"`
	State     string `json:"state"` // "cancel_requested"
}

// cancelRun queues a stop of one run of the job (store.CancelRun decides
// whether it can still be stopped: 409 when it has ended).
func (s *Server) cancelRun(c echo.Context) error {
	j, err := s.jobInScope(c)
	if err != nil {
		return err
	}
	key, err := s.runKeyOf(c, j.ID)
	if err != nil {
		return err
	}
	if _, err := s.store.CancelRun(c.Request().Context(), j.ID, key); err != nil {
		return jobError(err)
	}
	c.Response().Header().Set("Location", runPath(j.ID, key))
	return c.JSON(http.StatusAccepted, cancelAccepted{RunKey: key, CronJobID: j.ID, State: "cancel_requested"})
}

// runKeyOf reads the {run} path parameter as a run key of job jobID; a
// record id is looked up (its key is what the nodes know the run by).
func (s *Server) runKeyOf(c echo.Context, jobID string) (string, error) {
	id, key, ok := runRef(jobID, c.Param("run"))
	if !ok {
		return "", errNotFound
	}
	if id == 0 {
		return key.String(), nil
	}
	run, err := s.store.GetRun(c.Request().Context(), jobID, id, "")
	if err != nil {
		return "", err
	}
	return run.RunKey, nil
}
