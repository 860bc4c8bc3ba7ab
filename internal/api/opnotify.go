package api

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// Operator notification targets: the admin's webhooks and e-mail
// addresses for shard-level events (notify.OperatorKinds). They live
// under /admin only: the tenant routes answer 404 for them, and these
// answer 404 for a tenant's target.

// operatorTargetRequest is the body of an operator target's create.
type operatorTargetRequest struct {
	Kind    string   `json:"kind"` // webhook, email
	URL     string   `json:"url"`
	Secret  *string  `json:"secret"` // webhook; absent: generated
	Address string   `json:"address"`
	Events  []string `json:"events"`   // absent: all operator kinds
	ShardID *string  `json:"shard_id"` // absent or null: every shard
}

// checkOperatorTarget validates an operator target request: the channel
// as a tenant's target's (checkChannel), the kinds against the
// operator's.
func checkOperatorTarget(r operatorTargetRequest, allowPrivate bool) (store.NotificationTarget, error) {
	events, err := checkOperatorEvents(r.Events)
	if err != nil {
		return store.NotificationTarget{}, err
	}
	if r.ShardID != nil && !wire.ValidID(*r.ShardID) {
		return store.NotificationTarget{}, invalid("shard_id", "not a shard id")
	}
	t, err := checkChannel(targetRequest{Kind: r.Kind, URL: r.URL, Secret: r.Secret, Address: r.Address}, allowPrivate)
	if err != nil {
		return t, err
	}
	t.Events, t.ShardID = events, r.ShardID
	return t, nil
}

// checkOperatorEvents validates operator event kinds; none given
// subscribes to all.
func checkOperatorEvents(in []string) ([]string, error) {
	return checkKinds(in, notify.OperatorKinds, "operator event kind")
}

func (s *Server) createOperatorTarget(c echo.Context) error {
	var req operatorTargetRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	t, err := checkOperatorTarget(req, s.cfg.AllowPrivateTargets)
	if err != nil {
		return err
	}
	if t.Kind == "email" && !s.cfg.MailRelay {
		return errMailNotConfigured
	}
	created, err := s.store.CreateOperatorTarget(c.Request().Context(), t)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalid("shard_id", "no such shard")
	case errors.Is(err, store.ErrTooManyTargets):
		return &apiError{http.StatusUnprocessableEntity, ProblemDetail{Code: "quota_exceeded", Message: err.Error()}}
	case err != nil:
		return err
	}
	return c.JSON(http.StatusCreated, targetCreated{NotificationTarget: created, Secret: t.Secret})
}

func (s *Server) listOperatorTargets(c echo.Context) error {
	ts, err := s.store.ListOperatorTargets(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"targets": ts})
}

// operatorTarget loads the operator target of the path; a tenant's
// target is not found here.
func (s *Server) operatorTarget(c echo.Context) (store.NotificationTarget, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return store.NotificationTarget{}, err
	}
	t, err := s.store.GetTarget(c.Request().Context(), id)
	if err != nil {
		return t, err
	}
	if t.TenantID != "" {
		return t, errNotFound
	}
	return t, nil
}
