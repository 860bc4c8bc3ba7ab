//go:build e2e

package flow

import (
	"bytes"
	"fmt"
	"io"
	"net"
	netmail "net/mail"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// mailbox is the operator's SMTP relay as the tier sees it: a real SMTP
// server (go-smtp) on 127.0.0.1 that keeps every message it accepts.
type mailbox struct {
	mu   sync.Mutex
	msgs []*netmail.Message
	bad  []error // messages that did not parse
}

// startMailbox serves a mailbox on 127.0.0.1:0; stop ends it.
func startMailbox() (mb *mailbox, addr string, stop func(), err error) {
	mb = &mailbox{}
	srv := smtp.NewServer(mb)
	srv.Domain = "relay.flow.test"
	srv.ReadTimeout, srv.WriteTimeout = 30*time.Second, 30*time.Second
	srv.AllowInsecureAuth = false
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, fmt.Errorf("mailbox: %w", err)
	}
	go srv.Serve(l)
	return mb, l.Addr().String(), func() { srv.Close() }, nil
}

// NewSession is go-smtp's Backend.
func (mb *mailbox) NewSession(*smtp.Conn) (smtp.Session, error) { return &mailSession{mb: mb}, nil }

// to is every message addressed to rcpt (its To header), oldest first.
func (mb *mailbox) to(rcpt string) []*netmail.Message {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	var out []*netmail.Message
	for _, m := range mb.msgs {
		if a, err := netmail.ParseAddress(m.Header.Get("To")); err == nil && a.Address == rcpt {
			out = append(out, m)
		}
	}
	return out
}

type mailSession struct{ mb *mailbox }

func (s *mailSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *mailSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *mailSession) Reset()                               {}
func (s *mailSession) Logout() error                        { return nil }

func (s *mailSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m, err := netmail.ReadMessage(bytes.NewReader(data))
	s.mb.mu.Lock()
	defer s.mb.mu.Unlock()
	if err != nil {
		s.mb.bad = append(s.mb.bad, err)
		return nil
	}
	s.mb.msgs = append(s.mb.msgs, m)
	return nil
}
