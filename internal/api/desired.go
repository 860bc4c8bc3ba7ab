package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// errNotYourSet refuses a node another node's desired set: a node reads
// only its own shard's jobs, whatever a task it was handed names.
var errNotYourSet = &apiError{http.StatusForbidden, ProblemDetail{Code: "forbidden", Message: "a node reads only its own desired set"}}

// desiredJobs serves one page of the calling node's desired set
// (docs/semantics.md, "Paged desired sets"): the node a converge hands a
// reference reads its set here, page by page, instead of receiving it as
// one Temporal payload. The path names the node so that a task meant for
// another node, run here, fails instead of converging this node by
// another's reference. With a PageKey the page carries the core's
// signature, bound to this request (node, cursor, limit), in
// trust.PageSignatureHeader.
func (s *Server) desiredJobs(c echo.Context) error {
	n, nodeID, err := ownSet(c)
	if err != nil {
		return err
	}
	after := c.QueryParam("after")
	if after != "" && !wire.ValidID(after) {
		return invalid("after", "must be a job id (the previous page's next)")
	}
	limit := wire.DesiredPageSize
	if v := c.QueryParam("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > wire.MaxDesiredPageSize {
			return invalid("limit", "must be an integer from 1 to %d", wire.MaxDesiredPageSize)
		}
	}
	page, ok, err := s.store.NodeDesiredPage(c.Request().Context(), n.ID, after, limit)
	if err := s.desiredReadError("desired set", n, ok, err); err != nil {
		return err
	}
	return s.serveSigned(c, trust.PageRequest{Node: nodeID, After: after, Limit: limit}, page, "desired page")
}

// ownSet is the calling node and the node id its path names, which must
// be its own: a node reads only its own desired set (or its digest),
// whatever a task it was handed names.
func ownSet(c echo.Context) (store.Node, string, error) {
	n := nodeOf(c)
	nodeID, err := pathID(c, "node")
	if err != nil {
		return store.Node{}, "", err
	}
	if nodeID != n.ID {
		return store.Node{}, "", errNotYourSet
	}
	return n, nodeID, nil
}

// desiredReadError is the answer to a failed read of a node's desired set
// (its pages or its digest), or nil: revisions ahead of the transaction
// counter are 409 revisions_ahead (and an operator's error, logged), a
// node deleted since it authenticated 404.
func (s *Server) desiredReadError(what string, n store.Node, ok bool, err error) error {
	switch {
	case errors.Is(err, wire.ErrRevisionsAhead):
		s.log.Error(what+" refused: job revisions ahead of the transaction counter", "node", n.Name, "err", err)
		return &apiError{http.StatusConflict, ProblemDetail{Code: "revisions_ahead", Message: wire.ErrRevisionsAhead.Error()}}
	case err != nil:
		return err
	case !ok:
		return errNotFound
	}
	return nil
}

// serveSigned answers v as JSON, with the core's signature for req when
// it has a PageKey. The signature covers the exact bytes served, so v is
// marshalled here rather than by c.JSON.
func (s *Server) serveSigned(c echo.Context, req trust.PageRequest, v any, what string) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: marshal: %w", what, err)
	}
	if s.cfg.PageKey != nil {
		c.Response().Header().Set(trust.PageSignatureHeader, trust.SignPage(s.cfg.PageKey, req, body, s.now()))
	}
	return c.JSONBlob(http.StatusOK, body)
}

// desiredDigest serves the digest of the calling node's whole desired set
// (wire.DesiredDigest; docs/semantics.md, "The desired set's digest"): a
// node whose last no-op converge planned nothing for a set with this
// digest skips reading the pages. The same node check and revisions check
// as desiredJobs. With a PageKey the answer is signed like a page, but for
// the cursor wire.DesiredDigestCursor and limit 0, which no page request
// has: a digest never verifies as a page, nor a page as a digest.
func (s *Server) desiredDigest(c echo.Context) error {
	n, nodeID, err := ownSet(c)
	if err != nil {
		return err
	}
	d, ok, err := s.store.NodeDesiredDigest(c.Request().Context(), n.ID)
	if err := s.desiredReadError("desired set digest", n, ok, err); err != nil {
		return err
	}
	return s.serveSigned(c, trust.PageRequest{Node: nodeID, After: wire.DesiredDigestCursor, Limit: 0}, d, "desired digest")
}
