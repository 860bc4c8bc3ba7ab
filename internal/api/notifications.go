package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/hostcron/hostcron/internal/notify/mail"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// targetRequest is the body of a target's create.
type targetRequest struct {
	Kind      string   `json:"kind"` // webhook, email
	URL       string   `json:"url"`
	Secret    *string  `json:"secret"` // webhook; absent: generated
	Address   string   `json:"address"`
	Events    []string `json:"events"` // absent: all
	CronJobID *string  `json:"cron_job_id"`
}

// targetCreated is a target as its create answers: the only time its
// secret is shown.
type targetCreated struct {
	store.NotificationTarget
	Secret string `json:"secret,omitempty"`
}

// Secret lengths a tenant may choose.
const (
	minSecret = 16
	maxSecret = 256
)

// checkTarget validates a target request into a target of tenantID,
// generating a webhook's secret when none is given.
func checkTarget(r targetRequest, tenantID string, allowPrivate bool) (store.NotificationTarget, error) {
	events, err := checkEvents(r.Events)
	if err != nil {
		return store.NotificationTarget{}, err
	}
	if r.CronJobID != nil && !wire.ValidID(*r.CronJobID) {
		return store.NotificationTarget{}, invalid("cron_job_id", "not a cron job id")
	}
	t, err := checkChannel(r, allowPrivate)
	t.TenantID, t.CronJobID, t.Events = tenantID, r.CronJobID, events
	return t, err
}

// checkChannel validates where a target sends (a webhook's URL and
// secret, generated when none is given, or an e-mail address): the same
// rules for tenants' and the operator's targets.
func checkChannel(r targetRequest, allowPrivate bool) (store.NotificationTarget, error) {
	t := store.NotificationTarget{Kind: r.Kind}
	var err error
	switch r.Kind {
	case "webhook":
		if r.Address != "" {
			return t, invalid("address", "only for kind email")
		}
		if err := notify.CheckURL(r.URL, allowPrivate); err != nil {
			return t, invalid("url", "%s", err.Error())
		}
		t.URL = r.URL
		if t.Secret, err = webhookSecret(r.Secret); err != nil {
			return t, err
		}
	case "email":
		if r.URL != "" || r.Secret != nil {
			return t, invalid("url", "url and secret are only for kind webhook")
		}
		if t.Address, err = checkAddress(r.Address); err != nil {
			return t, err
		}
	default:
		return t, invalid("kind", "must be webhook or email")
	}
	return t, nil
}

// checkEvents validates a tenant target's event kinds, naming an unknown
// one; none given subscribes to all.
func checkEvents(in []string) ([]string, error) {
	return checkKinds(in, notify.Kinds, "event kind")
}

// checkKinds validates event kinds against the known ones (what names
// them in the error), dropping repeats; none given (nil) is all of them,
// an empty list is refused.
func checkKinds(in []string, known []notify.Kind, what string) ([]string, error) {
	names := make([]string, len(known))
	for i, k := range known {
		names[i] = string(k)
	}
	if in == nil {
		return names, nil
	}
	if len(in) == 0 {
		return nil, invalid("events", "at least one event kind")
	}
	var out []string
	for _, k := range in {
		if !slices.Contains(names, k) {
			return nil, invalid("events", "unknown %s %q (known: %s)", what, k, strings.Join(names, ", "))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// webhookSecret is the given secret, checked, or a new random one.
func webhookSecret(given *string) (string, error) {
	if given == nil {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	}
	s := *given
	if len(s) < minSecret || len(s) > maxSecret || strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return "", invalid("secret", "%d to %d printable ASCII characters", minSecret, maxSecret)
	}
	return s, nil
}

// checkAddress accepts a bare e-mail address (no display name: it goes
// into a header as it is).
func checkAddress(s string) (string, error) {
	a, err := mail.CheckAddress(s)
	if err != nil || a != s || len(s) > 254 {
		return "", invalid("address", "must be a bare e-mail address on a named domain, such as ops@example.com")
	}
	return s, nil
}

func (s *Server) createTarget(c echo.Context) error {
	tenantID, err := tenantInScope(c)
	if err != nil {
		return err
	}
	if _, err := s.store.GetTenant(c.Request().Context(), tenantID); err != nil {
		return err
	}
	var req targetRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	t, err := checkTarget(req, tenantID, s.cfg.AllowPrivateTargets)
	if err != nil {
		return err
	}
	if t.Kind == "email" && !s.cfg.MailRelay {
		return errMailNotConfigured
	}
	created, err := s.store.CreateTarget(c.Request().Context(), t)
	switch {
	case errors.Is(err, store.ErrNotFound) && t.CronJobID != nil:
		return invalid("cron_job_id", "no such cron job for this tenant")
	case errors.Is(err, store.ErrTooManyTargets):
		return &apiError{http.StatusUnprocessableEntity, ProblemDetail{Code: "quota_exceeded", Message: err.Error()}}
	case err != nil:
		return err
	}
	return c.JSON(http.StatusCreated, targetCreated{NotificationTarget: created, Secret: t.Secret})
}

func (s *Server) listTargets(c echo.Context) error {
	tenantID, err := tenantInScope(c)
	if err != nil {
		return err
	}
	ts, err := s.store.ListTargets(c.Request().Context(), tenantID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"targets": ts})
}

// errMailNotConfigured refuses an e-mail target without a relay: its
// deliveries could only pile up.
var errMailNotConfigured = &apiError{http.StatusUnprocessableEntity, ProblemDetail{Code: "mail_not_configured", Field: "kind",
	Message: "kind: this platform sends no e-mail (no SMTP relay is configured); use a webhook"}}

// targetInScope loads the target of the path if the caller may see it
// (another tenant's is not found, as jobs are).
func (s *Server) targetInScope(c echo.Context) (store.NotificationTarget, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return store.NotificationTarget{}, err
	}
	t, err := s.store.GetTarget(c.Request().Context(), id)
	if err != nil {
		return t, err
	}
	// An operator target (no tenant) is the admin group's: not found here
	// for anyone, tenant keys above all.
	if t.TenantID == "" || !who(c).canSee(t.TenantID) {
		return t, errNotFound
	}
	return t, nil
}

// targetLoader finds the path's target for one route group: a tenant's
// (targetInScope) or the operator's (operatorTarget).
type targetLoader func(echo.Context) (store.NotificationTarget, error)

// deleteTarget deletes the target load finds.
func (s *Server) deleteTarget(load targetLoader) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := load(c)
		if err != nil {
			return err
		}
		if err := s.store.DeleteTarget(c.Request().Context(), t.ID); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

// listDeliveries answers the deliveries of the target load finds, newest
// first; next_before pages on (absent at the end).
func (s *Server) listDeliveries(load targetLoader) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := load(c)
		if err != nil {
			return err
		}
		return s.deliveriesOf(c, t)
	}
}

// deliveriesOf answers a page of a target's deliveries.
func (s *Server) deliveriesOf(c echo.Context, t store.NotificationTarget) error {
	limit, before, err := idPageParams(c)
	if err != nil {
		return err
	}
	ds, err := s.store.ListDeliveries(c.Request().Context(), t.ID, before, limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, idPage("deliveries", ds, limit, func(d store.DeliveryView) int64 { return d.ID }))
}
