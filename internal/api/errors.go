package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/quota"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/store"
)

// Problem is the error body of every failed request.
type Problem struct {
	Error ProblemDetail `json:"error"`
}

// ProblemDetail names what went wrong; Field is set for validation errors.
type ProblemDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// DeletedAt is when the job went, on a 410 about a deleted job.
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

// apiError is an error with its HTTP status.
type apiError struct {
	status int
	detail ProblemDetail
}

func (e *apiError) Error() string { return e.detail.Message }

func invalid(field, format string, args ...any) error {
	return &apiError{http.StatusBadRequest, ProblemDetail{Code: "invalid", Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}}
}

var (
	errNotFound     = &apiError{http.StatusNotFound, ProblemDetail{Code: "not_found", Message: "not found"}}
	errUnauthorized = &apiError{http.StatusUnauthorized, ProblemDetail{Code: "unauthorized", Message: "missing or unknown credential"}}
	errForbidden    = &apiError{http.StatusForbidden, ProblemDetail{Code: "forbidden", Message: "this key's scope does not allow this"}}
	errReadOnly     = &apiError{http.StatusForbidden, ProblemDetail{Code: "read_only", Message: "this key is read-only"}}
)

// jobGone answers a request about a job whose delete finished (410): its
// own tenant learns that it went and when; its runs and audit trail stay
// readable (historyInScope) for the run retention.
func jobGone(d store.DeletedJob) error {
	at := d.DeletedAt.UTC()
	return &apiError{http.StatusGone, ProblemDetail{Code: "gone", DeletedAt: &at,
		Message: "cron job deleted at " + at.Format(time.RFC3339) + "; its runs and events stay readable for the run retention"}}
}

// scheduleError turns a parser error into a 400 naming the request field.
func scheduleError(err error) error {
	var se *schedule.Error
	if errors.As(err, &se) {
		if se.Field == "timezone" {
			return invalid("timezone", "%s", se.Error())
		}
		return invalid("schedule", "%s", se.Error())
	}
	return err
}

// errorHandler renders every error as a Problem; store errors map to 404
// and 409, anything unknown to 500 (logged, not shown).
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var ae *apiError
		var he *echo.HTTPError
		var ce *store.ConflictError
		var qe *quota.Exceeded
		var th *quota.Throttled
		switch {
		case errors.As(err, &ae):
		case errors.As(err, &qe):
			ae = &apiError{http.StatusUnprocessableEntity, ProblemDetail{Code: "quota_exceeded", Field: qe.Field, Message: qe.Msg}}
		case errors.As(err, &th):
			c.Response().Header().Set("Retry-After", retryAfterSeconds(th.Wait))
			ae = &apiError{http.StatusTooManyRequests, ProblemDetail{Code: "rate_limited", Message: th.Error()}}
		case errors.Is(err, store.ErrNotFound):
			ae = errNotFound
		case errors.As(err, &ce):
			ae = &apiError{http.StatusConflict, ProblemDetail{Code: "conflict", Message: ce.Reason}}
		case store.Unavailable(err):
			log.Warn("database unavailable", "method", c.Request().Method, "path", c.Path(), "err", err)
			c.Response().Header().Set("Retry-After", "5")
			ae = &apiError{http.StatusServiceUnavailable, ProblemDetail{Code: "unavailable", Message: "database unavailable, retry later"}}
		case errors.As(err, &he):
			ae = &apiError{he.Code, ProblemDetail{Code: strings.ReplaceAll(strings.ToLower(http.StatusText(he.Code)), " ", "_"), Message: fmt.Sprint(he.Message)}}
		default:
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
			ae = &apiError{http.StatusInternalServerError, ProblemDetail{Code: "internal", Message: "internal error"}}
		}
		if err := c.JSON(ae.status, Problem{Error: ae.detail}); err != nil {
			log.Warn("write error response", "err", err)
		}
	}
}

// retryAfterSeconds is a Retry-After header's value for a wait: whole
// seconds, rounded up, at least 1 (0 would invite a retry at once).
func retryAfterSeconds(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64((wait+time.Second-1)/time.Second)), 10)
}

// decodeStrict decodes a JSON body, rejecting unknown fields, trailing data
// and bodies over 64 KiB.
func decodeStrict(c echo.Context, v any) error { return decodeBody(c, v, true) }

// decodeLenient is decodeStrict that ignores unknown fields: for bodies a
// newer peer may extend (a node's outcome).
func decodeLenient(c echo.Context, v any) error { return decodeBody(c, v, false) }

// maxJSONBody bounds a decoded request body.
const maxJSONBody = 64 << 10

func decodeBody(c echo.Context, v any, strict bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, maxJSONBody))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		var me *http.MaxBytesError
		switch {
		case errors.As(err, &me):
			return invalid("body", "larger than %d bytes", maxJSONBody)
		case errors.As(err, &te) && te.Field == "":
			return invalid("body", "must be a JSON object")
		case errors.As(err, &te):
			// The JSON kind, never the Go type: that would leak internals.
			return invalid(te.Field, "must be %s", jsonKind(te.Type))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return invalid(name, "unknown field")
		case errors.As(err, &se):
			return invalid("body", "not valid JSON at byte %d", se.Offset)
		default:
			return invalid("body", "not valid JSON")
		}
	}
	if dec.More() {
		return invalid("body", "has data after the JSON object")
	}
	return nil
}

// jsonKind names what JSON value a Go type accepts.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct:
		if t.String() == "time.Time" {
			return "an RFC 3339 time string"
		}
		return "an object"
	case reflect.Map:
		return "an object"
	}
	return "of another type"
}

// intParam reads an optional integer query parameter in [lo, hi]; absent,
// it is def. A bad value is a 400 naming the parameter.
func intParam(c echo.Context, name string, def, lo, hi int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, invalid(name, "must be a number from %d to %d", lo, hi)
	}
	return n, nil
}
