package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/quota"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// jobRequest is the body of create and update. Pointers tell "absent"
// from "zero": on update, absent fields keep their value.
type jobRequest struct {
	Name             *string `json:"name"`
	WebrootID        *string `json:"webroot_id"`
	Schedule         *string `json:"schedule"`
	Timezone         *string `json:"timezone"`
	Command          *string `json:"command"`
	WorkingDirectory *string `json:"working_directory"`
	Enabled          *bool   `json:"enabled"`
	TimeoutSeconds   *int    `json:"timeout_seconds"`
	MaxMemoryMB      *int    `json:"max_memory_mb"`
	MaxFailures      *int    `json:"max_failures"`
	// CatchUpWindowSeconds: 0 (the default) to wire.MaxCatchUpWindowSec.
	CatchUpWindowSeconds *int `json:"catchup_window_seconds"`
	// OverlapPolicy: skip (the default), buffer_one or cancel_previous.
	OverlapPolicy *string `json:"overlap_policy"`
	// Retries: 0 (the default) to wire.MaxRetries; RetryDelaySeconds:
	// wire.MinRetryDelaySec to wire.MaxRetryDelaySec (default 60).
	Retries           *int `json:"retries"`
	RetryDelaySeconds *int `json:"retry_delay_seconds"`
	// Environment replaces the job's whole map when present ({} clears
	// it); absent or null keeps it.
	// A null value is refused, not read as "" (review).
	Environment *map[string]*string `json:"environment"`
}

// jobResponse is a cron job with its next fire time.
type jobResponse struct {
	store.CronJob
	NextRunAt *time.Time `json:"next_run_at"`
	// RunningSince is when the job's oldest run in progress started (a
	// node reported it; absent when none runs). Set on reads (get, list).
	RunningSince *time.Time `json:"running_since,omitempty"`
	// Warnings is set on create and update answers only: the DST notes
	// of the schedule as saved ([] when none), so a tenant learns of a
	// skipped or merged run when it writes the schedule, not when it
	// misses one.
	Warnings *[]dstNote `json:"warnings,omitempty"`
}

// dstNote is schedule.DSTNote as the API shows it.
type dstNote struct {
	Kind    string     `json:"kind"`
	Wall    string     `json:"wall"`
	At      *time.Time `json:"at"` // null for a skipped run
	Message string     `json:"message"`
}

// dstHorizonMonths is how far ahead preview and warnings look for clock
// changes: a year holds every change of a zone's yearly rule.
const dstHorizonMonths = 12

// dstNotes lists the schedule's DST notes from `from` on ([] when none).
func dstNotes(sched *schedule.Schedule, from time.Time) []dstNote {
	out := []dstNote{}
	for _, n := range sched.DSTNotes(from, dstHorizonMonths) {
		note := dstNote{Kind: n.Kind, Wall: n.Wall, Message: n.Message}
		if !n.At.IsZero() {
			at := n.At
			note.At = &at
		}
		out = append(out, note)
	}
	return out
}

// defaults of a new job.
var newJobDefaults = store.JobFields{Timezone: "UTC", Enabled: true, TimeoutSeconds: 300, MaxMemoryMB: 256, MaxFailures: 5,
	OverlapPolicy: wire.OverlapSkip, RetryDelaySeconds: wire.DefaultRetryDelaySec}

// apply overlays the request on base and validates the result.
func (r jobRequest) apply(base store.JobFields) (store.JobFields, error) {
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	setInt := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	spec := base
	set(&spec.Name, r.Name)
	set(&spec.WebrootID, r.WebrootID)
	set(&spec.Schedule, r.Schedule)
	set(&spec.Timezone, r.Timezone)
	set(&spec.Command, r.Command)
	set(&spec.WorkingDirectory, r.WorkingDirectory)
	setInt(&spec.TimeoutSeconds, r.TimeoutSeconds)
	setInt(&spec.MaxMemoryMB, r.MaxMemoryMB)
	setInt(&spec.MaxFailures, r.MaxFailures)
	setInt(&spec.CatchUpWindowSeconds, r.CatchUpWindowSeconds)
	if r.OverlapPolicy != nil {
		spec.OverlapPolicy = wire.OverlapPolicy(*r.OverlapPolicy)
	}
	setInt(&spec.Retries, r.Retries)
	setInt(&spec.RetryDelaySeconds, r.RetryDelaySeconds)
	if r.Enabled != nil {
		spec.Enabled = *r.Enabled
	}
	if r.Environment != nil {
		env, err := environment(*r.Environment)
		if err != nil {
			return spec, err
		}
		spec.Environment = env
	}
	return spec, validateSpec(spec)
}

// environment is a request's variables, refusing a null value: the
// tenant meant something, and "" is not it.
func environment(in map[string]*string) (map[string]string, error) {
	out := make(map[string]string, len(in))
	for _, name := range slices.Sorted(maps.Keys(in)) {
		if in[name] == nil {
			return nil, invalid("environment", "%q has a null value: give a string (\"\" for empty)", name)
		}
		out[name] = *in[name]
	}
	return out, nil
}

// MaxNameChars bounds a job's name.
const MaxNameChars = 100

func validateSpec(spec store.JobFields) error {
	if err := checkText("name", spec.Name, MaxNameChars); err != nil {
		return err
	}
	if !wire.ValidID(spec.WebrootID) {
		return invalid("webroot_id", "must be the UUID of one of the tenant's webroots")
	}
	if spec.Timezone == "" {
		return invalid("timezone", "must not be empty (omit it for UTC)")
	}
	if _, err := schedule.Parse(spec.Schedule, spec.Timezone); err != nil {
		return scheduleError(err)
	}
	if err := jobspec.ValidateCommand(spec.Command); err != nil {
		return invalid("command", "%v", err)
	}
	if err := jobspec.ValidateWorkingDirectory(spec.WorkingDirectory); err != nil {
		return invalid("working_directory", "%v", err)
	}
	if err := jobspec.ValidateEnvironment(spec.Environment); err != nil {
		// The message names the offending variable (EnvError), never its value.
		return invalid("environment", "%v", err)
	}
	switch {
	case spec.TimeoutSeconds < 1 || spec.TimeoutSeconds > 86400:
		return invalid("timeout_seconds", "must be between 1 and 86400")
	case spec.MaxMemoryMB < 16 || spec.MaxMemoryMB > 65536:
		return invalid("max_memory_mb", "must be between 16 and 65536")
	case spec.MaxFailures < 0 || spec.MaxFailures > 1000:
		return invalid("max_failures", "must be between 0 (never auto-disable) and 1000")
	case spec.CatchUpWindowSeconds < 0 || spec.CatchUpWindowSeconds > wire.MaxCatchUpWindowSec:
		return invalid("catchup_window_seconds", "must be between 0 (a missed run never runs) and %d (a day)", wire.MaxCatchUpWindowSec)
	case spec.OverlapPolicy == "" || !spec.OverlapPolicy.Valid():
		return invalid("overlap_policy", "must be one of skip (the default), buffer_one or cancel_previous")
	case spec.Retries < 0 || spec.Retries > wire.MaxRetries:
		return invalid("retries", "must be between 0 (a failed run is not retried) and %d", wire.MaxRetries)
	case spec.RetryDelaySeconds < wire.MinRetryDelaySec || spec.RetryDelaySeconds > wire.MaxRetryDelaySec:
		return invalid("retry_delay_seconds", "must be between %d and %d (the wait before the first retry; each later one waits twice as long)",
			wire.MinRetryDelaySec, wire.MaxRetryDelaySec)
	}
	return nil
}

// respondJob answers with one job and its version as the ETag, which a
// later If-Match names.
func (s *Server) respondJob(c echo.Context, status int, j store.CronJob) error {
	setETag(c, j)
	return c.JSON(status, s.withNext(j))
}

// setETag names the job's version, which a later If-Match names.
func setETag(c echo.Context, j store.CronJob) {
	c.Response().Header().Set("ETag", `"`+strconv.FormatInt(j.Version, 10)+`"`)
}

// withRunning is the jobs as the API shows them, with when each one's
// run in progress started.
func (s *Server) withRunning(c echo.Context, jobs []store.CronJob) ([]jobResponse, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	running, err := s.store.RunningSince(c.Request().Context(), ids)
	if err != nil {
		return nil, err
	}
	out := make([]jobResponse, len(jobs))
	for i, j := range jobs {
		out[i] = s.withNext(j)
		if at, ok := running[j.ID]; ok {
			out[i].RunningSince = &at
		}
	}
	return out, nil
}

// respondWritten answers a create or update: the job as respondJob does,
// plus the DST warnings of the schedule it now has.
func (s *Server) respondWritten(c echo.Context, status int, j store.CronJob) error {
	setETag(c, j)
	resp := s.withNext(j)
	warnings := []dstNote{}
	if sched, err := schedule.ParseWithSeconds(j.Schedule, j.Timezone); err == nil {
		warnings = dstNotes(sched, s.now())
	}
	resp.Warnings = &warnings
	return c.JSON(status, resp)
}

// ifMatch returns the version an If-Match header names: a bare or quoted
// version; 0 when absent or "*" (any version).
func ifMatch(c echo.Context) (int64, error) {
	h := strings.TrimSpace(c.Request().Header.Get("If-Match"))
	if h == "" || h == "*" {
		return 0, nil
	}
	if len(h) >= 2 && h[0] == '"' && h[len(h)-1] == '"' {
		h = h[1 : len(h)-1]
	}
	v, err := strconv.ParseInt(h, 10, 64)
	if err != nil || v < 1 {
		return 0, invalid("If-Match", "want the job's version, e.g. \"3\"")
	}
	return v, nil
}

var (
	errPreconditionFailed = &apiError{http.StatusPreconditionFailed, ProblemDetail{Code: "precondition_failed",
		Message: "the cron job has changed: its version is not the one If-Match names"}}
	errIdempotencyKeyReused = &apiError{http.StatusUnprocessableEntity, ProblemDetail{Code: "idempotency_key_reused",
		Field: "Idempotency-Key", Message: "Idempotency-Key: was used for a different request within 24 hours"}}
)

// jobError maps the store's job errors onto answers.
func jobError(err error) error {
	switch {
	case errors.Is(err, store.ErrPreconditionFailed):
		return errPreconditionFailed
	case errors.Is(err, store.ErrIdempotencyKeyReused):
		return errIdempotencyKeyReused
	case errors.Is(err, store.ErrUnknownWebroot):
		return invalid("webroot_id", "no such webroot for this tenant")
	}
	return err
}

// idempotencyKey reads a create's Idempotency-Key header (nil if absent):
// 1 to 128 printable ASCII characters. The request is identified by its
// validated fields, so a retry that spells the same job differently
// (whitespace, defaults written out) is still the same request.
func idempotencyKey(c echo.Context, f store.JobFields) (*store.IdempotencyKey, error) {
	key, ok := c.Request().Header["Idempotency-Key"]
	if !ok {
		return nil, nil
	}
	if len(key) != 1 || len(key[0]) < 1 || len(key[0]) > 128 || !printableASCII(key[0]) {
		return nil, invalid("Idempotency-Key", "want 1 to 128 printable ASCII characters")
	}
	body, err := json.Marshal(idempotencyFields{JobFields: f, Name: f.Name, Environment: f.Environment, Retries: f.Retries,
		RetryDelaySeconds: retryDelayIdentity(f.RetryDelaySeconds)})
	if err != nil {
		return nil, fmt.Errorf("idempotency key: %w", err)
	}
	sum := sha256.Sum256(body)
	return &store.IdempotencyKey{Key: key[0], Hash: sum[:]}, nil
}

// idempotencyFields is what identifies a create: the job's fields, the
// name and environment only when given, so a retry across the upgrades
// that added them hashes as its first request did.
type idempotencyFields struct {
	store.JobFields
	Name        string            `json:"name,omitempty"`        // shadows JobFields.Name
	Environment map[string]string `json:"environment,omitempty"` // shadows JobFields.Environment
	// Retries and RetryDelaySeconds only when not the default: a create
	// from before retries hashes as it did.
	Retries           int `json:"retries,omitempty"`
	RetryDelaySeconds int `json:"retry_delay_seconds,omitempty"`
}

// retryDelayIdentity is the delay as the create's identity holds it: 0
// (left out) for the default.
func retryDelayIdentity(sec int) int {
	if sec == wire.DefaultRetryDelaySec {
		return 0
	}
	return sec
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// withNext adds next_run_at: null unless the job is enabled and not being
// deleted.
func (s *Server) withNext(j store.CronJob) jobResponse {
	resp := jobResponse{CronJob: j}
	if j.Enabled {
		// An enabled job has no disable reason; an older replica's enable
		// (rolling deploy) does not clear the column.
		resp.DisabledReason = ""
	}
	if !j.Enabled || j.Status == wire.StatusDeleting {
		return resp
	}
	if sched, err := schedule.ParseWithSeconds(j.Schedule, j.Timezone); err == nil { // tolerant of operator-made 6-field jobs
		if next := sched.Next(s.now()); !next.IsZero() {
			resp.NextRunAt = &next
		}
	}
	return resp
}

// tenantInScope returns the tenant path id if the caller may see it.
func tenantInScope(c echo.Context) (string, error) {
	id, err := pathID(c, "tenant")
	if err != nil {
		return "", err
	}
	if !who(c).canSee(id) {
		return "", errNotFound
	}
	return id, nil
}

// jobInScope loads the job of the path if the caller may see it. A job
// deleted since answers 410 Gone to its own tenant (jobGone); to anyone
// else it is unknown (404), as any id it may not see.
func (s *Server) jobInScope(c echo.Context) (store.CronJob, error) {
	j, gone, err := s.jobOrTombstone(c)
	if err == nil && gone != nil {
		return j, jobGone(*gone)
	}
	return j, err
}

// historyInScope is the id of the path's job if the caller may read its
// history (runs, audit trail): a live job's, or a deleted job's while its
// tombstone lasts (the run retention). deleted tells which.
func (s *Server) historyInScope(c echo.Context) (id string, deleted bool, err error) {
	j, gone, err := s.jobOrTombstone(c)
	switch {
	case err != nil:
		return "", false, err
	case gone != nil:
		return gone.ID, true, nil
	}
	return j.ID, false, nil
}

// jobOrTombstone loads the path's job, or the tombstone of a job deleted
// since (gone), if the caller may see its tenant; anything else is 404.
func (s *Server) jobOrTombstone(c echo.Context) (store.CronJob, *store.DeletedJob, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return store.CronJob{}, nil, err
	}
	ctx := c.Request().Context()
	j, err := s.store.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		d, derr := s.store.GetDeletedJob(ctx, id)
		switch {
		case errors.Is(derr, store.ErrNotFound):
			return j, nil, err
		case derr != nil:
			return j, nil, derr
		case !who(c).canSee(d.TenantID):
			return j, nil, errNotFound
		}
		return j, &d, nil
	}
	if err != nil {
		return j, nil, err
	}
	if !who(c).canSee(j.TenantID) {
		return j, nil, errNotFound
	}
	return j, nil, nil
}

func (s *Server) createJob(c echo.Context) error {
	tenantID, err := tenantInScope(c)
	if err != nil {
		return err
	}
	if _, err := s.store.GetTenant(c.Request().Context(), tenantID); err != nil {
		return err
	}
	var req jobRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	switch {
	case req.WebrootID == nil:
		return invalid("webroot_id", "is required")
	case req.Schedule == nil:
		return invalid("schedule", "is required")
	case req.Command == nil:
		return invalid("command", "is required")
	}
	spec, err := req.apply(newJobDefaults)
	if err != nil {
		return err
	}
	idem, err := idempotencyKey(c, spec)
	if err != nil {
		return err
	}
	_, limits, err := s.store.TenantQuotas(c.Request().Context(), tenantID)
	if err != nil {
		return err
	}
	if err := s.checkQuota(limits, store.JobFields{}, spec); err != nil {
		// A retry of a create that succeeded before the limits were
		// lowered answers with its job, as every replay does.
		if idem != nil {
			if first, ok, rerr := s.store.IdempotentReplay(c.Request().Context(), tenantID, *idem); rerr != nil {
				return rerr
			} else if ok {
				return s.respondWritten(c, http.StatusCreated, first)
			}
		}
		return err
	}
	// A replayed create answers as the first one did: 201 with that job.
	j, _, err := s.store.CreateJob(c.Request().Context(), tenantID, spec, idem)
	if err != nil {
		return jobError(err)
	}
	return s.respondWritten(c, http.StatusCreated, j)
}

func (s *Server) listJobs(c echo.Context) error {
	tenantID, err := tenantInScope(c)
	if err != nil {
		return err
	}
	if _, err := s.store.GetTenant(c.Request().Context(), tenantID); err != nil {
		return err
	}
	q, err := jobQuery(c)
	if err != nil {
		return err
	}
	jobs, next, err := s.store.ListJobs(c.Request().Context(), tenantID, q)
	if err != nil {
		return err
	}
	out, err := s.withRunning(c, jobs)
	if err != nil {
		return err
	}
	var cursor *string
	if next != nil {
		c := encodeJobCursor(*next)
		cursor = &c
	}
	return c.JSON(http.StatusOK, map[string]any{"cron_jobs": out, "next_cursor": cursor})
}

// maxJobsPage bounds a page of jobs; it is also the default, the most jobs
// a tenant may have (store.MaxJobsPerTenant), so a client from before
// paging still gets every job.
const maxJobsPage = 1000

// jobQuery reads the jobs listing's limit, cursor and status filter (a
// comma-separated list).
func jobQuery(c echo.Context) (store.JobQuery, error) {
	var q store.JobQuery
	var err error
	if q.Limit, err = intParam(c, "limit", maxJobsPage, 1, maxJobsPage); err != nil {
		return q, err
	}
	if cur := c.QueryParam("cursor"); cur != "" {
		pos, ok := decodeJobCursor(cur)
		if !ok {
			return q, invalid("cursor", "not a cursor of this listing (pass next_cursor as given)")
		}
		q.After = &pos
	}
	q.Statuses, err = listParam(c, "status", wire.Statuses)
	return q, err
}

// listParam reads an optional comma-separated query parameter whose every
// element must be one of allowed; repeats are dropped.
func listParam[T ~string](c echo.Context, name string, allowed []T) ([]T, error) {
	v := c.QueryParam(name)
	if v == "" {
		return nil, nil
	}
	var out []T
	for _, p := range strings.Split(v, ",") {
		t := T(p)
		if !slices.Contains(allowed, t) {
			return nil, invalid(name, "%q is not one of %v", p, allowed)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (s *Server) getJob(c echo.Context) error {
	j, err := s.jobInScope(c)
	if err != nil {
		return err
	}
	resp, err := s.withRunning(c, []store.CronJob{j})
	if err != nil {
		return err
	}
	setETag(c, j)
	return c.JSON(http.StatusOK, resp[0])
}

// updateJob overlays the request's present fields on the job as the
// store's transaction holds it locked, never on the copy read here for
// the scope check: a racing disable cannot be undone by a command edit.
func (s *Server) updateJob(c echo.Context) error {
	j, ifVersion, err := s.jobToChange(c)
	if err != nil {
		return err
	}
	var req jobRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	_, limits, err := s.store.TenantQuotas(c.Request().Context(), j.TenantID)
	if err != nil {
		return err
	}
	// The merge happens under the job's row lock; the quota is checked on
	// its result, against what the request changes.
	updated, err := s.store.UpdateJob(c.Request().Context(), j.ID, ifVersion, func(base store.JobFields) (store.JobFields, error) {
		f, err := req.apply(base)
		if err != nil {
			return f, err
		}
		return f, s.checkQuota(limits, base, f)
	})
	if err != nil {
		return jobError(err)
	}
	return s.respondWritten(c, http.StatusOK, updated)
}

// checkQuota holds a job to the tenant's limits in what it changes from
// before (a create changes everything): a job made under higher limits
// keeps running, and an edit of its command alone goes through.
func (s *Server) checkQuota(l quota.Limits, before, after store.JobFields) error {
	sched, err := schedule.Parse(after.Schedule, after.Timezone)
	if err != nil {
		return scheduleError(err)
	}
	changed := quota.Changed{
		Schedule: before.Schedule != after.Schedule || before.Timezone != after.Timezone,
		Timeout:  before.TimeoutSeconds != after.TimeoutSeconds,
		Memory:   before.MaxMemoryMB != after.MaxMemoryMB,
	}
	if e := quota.Check(l, quota.Job{Schedule: sched, TimeoutSeconds: after.TimeoutSeconds, MaxMemoryMB: after.MaxMemoryMB}, changed, s.now()); e != nil {
		return e
	}
	return nil
}

// jobToChange is the job a change request names, if the key may see it,
// and the version its If-Match names (0: any). A malformed If-Match
// answers 400 before the job is looked up.
func (s *Server) jobToChange(c echo.Context) (store.CronJob, int64, error) {
	ifVersion, err := ifMatch(c)
	if err != nil {
		return store.CronJob{}, 0, err
	}
	j, err := s.jobInScope(c)
	return j, ifVersion, err
}

// jobAction wraps delete, enable, disable, retry and run-now: scope check,
// If-Match, then the store's state transition (409 when the state does not
// allow it, 412 when the job is not at the named version).
func (s *Server) jobAction(act func(context.Context, string, int64) (store.CronJob, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		j, ifVersion, err := s.jobToChange(c)
		if err != nil {
			return err
		}
		changed, err := act(c.Request().Context(), j.ID, ifVersion)
		if err != nil {
			return jobError(err)
		}
		return s.respondJob(c, http.StatusAccepted, changed)
	}
}

// preview shows the OnCalendar values, next fire times, explanation and
// DST notes of an expression.
func (s *Server) preview(c echo.Context) error {
	tz := c.QueryParam("timezone")
	if tz == "" {
		tz = "UTC"
	}
	count, err := intParam(c, "count", 5, 1, 100)
	if err != nil {
		return err
	}
	sched, err := schedule.Parse(c.QueryParam("schedule"), tz)
	if err != nil {
		return scheduleError(err)
	}
	return c.JSON(http.StatusOK, s.previewOf(sched, tz, count))
}

// jobPreview is preview for a job's own schedule and zone, whether or not
// the job is enabled (next_run_at says whether it will run).
func (s *Server) jobPreview(c echo.Context) error {
	j, err := s.jobInScope(c)
	if err != nil {
		return err
	}
	count, err := intParam(c, "count", 5, 1, 100)
	if err != nil {
		return err
	}
	// Operator-made jobs may carry a seconds field; the node accepts it.
	sched, err := schedule.ParseWithSeconds(j.Schedule, j.Timezone)
	if err != nil {
		return fmt.Errorf("job %s: stored schedule: %w", j.ID, err)
	}
	return c.JSON(http.StatusOK, s.previewOf(sched, j.Timezone, count))
}

// previewBody is the answer of both previews.
type previewBody struct {
	Schedule    string      `json:"schedule"`
	Timezone    string      `json:"timezone"`
	OnCalendar  []string    `json:"on_calendar"`
	NextRuns    []time.Time `json:"next_runs"`
	Explanation string      `json:"explanation"`
	DSTNotes    []dstNote   `json:"dst_notes"`
}

func (s *Server) previewOf(sched *schedule.Schedule, tz string, count int) previewBody {
	now := s.now()
	return previewBody{
		Schedule: sched.Expr(), Timezone: tz, OnCalendar: sched.OnCalendar(),
		NextRuns: sched.NextN(now, count), Explanation: sched.Explain(), DSTNotes: dstNotes(sched, now),
	}
}
