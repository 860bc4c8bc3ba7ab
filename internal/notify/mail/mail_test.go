package mail

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	netmail "net/mail"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// --- an in-process SMTP server that records what it receives ---

type received struct {
	From string
	To   []string
	Data []byte
	TLS  bool
	User string
}

type backend struct {
	user, pass string     // AUTH PLAIN credentials; "" offers no AUTH
	rcptErr    error      // answer to RCPT TO when set
	dataErr    error      // answer to the end of DATA when set
	mu         sync.Mutex // guards msgs
	msgs       []received
}

func (b *backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{b: b, conn: c}, nil
}

func (b *backend) messages() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.msgs)
}

type session struct {
	b    *backend
	conn *smtp.Conn
	cur  received
}

func (s *session) AuthMechanisms() []string {
	if s.b.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != s.b.user || password != s.b.pass {
			return smtp.ErrAuthFailed
		}
		s.cur.User = username
		return nil
	}), nil
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if s.b.user != "" && s.cur.User == "" {
		return smtp.ErrAuthRequired
	}
	s.cur.From = from
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.b.rcptErr != nil {
		return s.b.rcptErr
	}
	s.cur.To = append(s.cur.To, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.b.dataErr != nil {
		return s.b.dataErr
	}
	s.cur.Data = data
	_, s.cur.TLS = s.conn.TLSConnectionState()
	s.b.mu.Lock()
	s.b.msgs = append(s.b.msgs, s.cur)
	s.b.mu.Unlock()
	return nil
}

func (s *session) Reset()        { s.cur = received{User: s.cur.User} }
func (s *session) Logout() error { return nil }

// selfSigned is a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "relay.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// startServer serves be on 127.0.0.1:0, with STARTTLS when withTLS; it
// returns the address and a TLS config that trusts the server.
func startServer(t *testing.T, be *backend, withTLS bool) (string, *tls.Config) {
	t.Helper()
	srv := smtp.NewServer(be)
	srv.Domain = "relay.test"
	srv.ReadTimeout = 10 * time.Second
	srv.WriteTimeout = 10 * time.Second
	var clientCfg *tls.Config
	if withTLS {
		cert, pool := selfSigned(t)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		clientCfg = &tls.Config{RootCAs: pool}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), clientCfg
}

func tlsRelay(addr string, cfg *tls.Config) Relay {
	return Relay{
		Addr: addr, From: "Hostcron <cron@platform.example>",
		Username: "relayuser", Password: "s3cret",
		StartTLS: true, TLSConfig: cfg, Timeout: 10 * time.Second, HeloName: "core1.platform.example",
	}
}

func sampleEvent() Event {
	return Event{
		ID: 42, Kind: KindDisableWarning, TenantID: "t-1", CronJobID: "cj-7",
		JobName: "nightly backup", Schedule: "*/5 * * * *", RunKey: "cj-7/2026-11-22T16:00:00Z",
		Result: "exit_code", FailureReason: "exit status 2",
		OutputTail:          "starting\n.\nerror: disk full " + strings.Repeat("x", 200) + "\n",
		At:                  time.Date(2026, 11, 22, 16, 0, 0, 0, time.UTC),
		ConsecutiveFailures: 4, MaxFailures: 5,
	}
}

// parsed is a received message read back the way a mail client would.
type parsed struct {
	Header netmail.Header
	Body   string // quoted-printable decoded
}

func parse(t *testing.T, data []byte) parsed {
	t.Helper()
	m, err := netmail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("received message does not parse: %v\n%s", err, data)
	}
	if got := m.Header.Get("Content-Transfer-Encoding"); got != "quoted-printable" {
		t.Fatalf("Content-Transfer-Encoding = %q", got)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(m.Body))
	if err != nil {
		t.Fatalf("body is not quoted-printable: %v", err)
	}
	return parsed{Header: m.Header, Body: strings.ReplaceAll(string(body), "\r\n", "\n")}
}

func decodedSubject(t *testing.T, h netmail.Header) string {
	t.Helper()
	s, err := new(mime.WordDecoder).DecodeHeader(h.Get("Subject"))
	if err != nil {
		t.Fatalf("subject %q: %v", h.Get("Subject"), err)
	}
	return s
}

var wantHeaders = []string{
	"Auto-Submitted", "Content-Transfer-Encoding", "Content-Type", "Date",
	"From", "Message-Id", "Mime-Version", "Subject", "To",
}

// headerKeys are the header names a parser sees, apart from the Received
// line go-smtp's server adds.
func headerKeys(h netmail.Header) []string {
	var keys []string
	for k := range h {
		if k != "Received" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// --- Send against the in-process relay ---

func TestSendStartTLSAuthDeliversExactMessage(t *testing.T) {
	be := &backend{user: "relayuser", pass: "s3cret"}
	addr, cfg := startServer(t, be, true)
	e := sampleEvent()
	m := Render("owner@tenant.example", e)
	before := time.Now().Add(-time.Second).Truncate(time.Second)

	if err := tlsRelay(addr, cfg).Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	msgs := be.messages()
	if len(msgs) != 1 {
		t.Fatalf("relay received %d messages, want 1", len(msgs))
	}
	got := msgs[0]
	if !got.TLS || got.User != "relayuser" {
		t.Errorf("TLS=%v user=%q, want TLS and relayuser", got.TLS, got.User)
	}
	if got.From != "cron@platform.example" || !slices.Equal(got.To, []string{"owner@tenant.example"}) {
		t.Errorf("envelope %q -> %q", got.From, got.To)
	}
	p := parse(t, got.Data)
	if keys := headerKeys(p.Header); !slices.Equal(keys, wantHeaders) {
		t.Errorf("headers %q, want %q", keys, wantHeaders)
	}
	for k, want := range map[string]string{
		"From":           `"Hostcron" <cron@platform.example>`,
		"To":             "owner@tenant.example",
		"Message-Id":     "<hostcron-event-42@platform.example>",
		"Mime-Version":   "1.0",
		"Content-Type":   "text/plain; charset=utf-8",
		"Auto-Submitted": "auto-generated",
	} {
		if v := p.Header.Get(k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	if s := decodedSubject(t, p.Header); s != `[hostcron] Job "nightly backup" will be disabled after one more failure` {
		t.Errorf("Subject = %q", s)
	}
	date, err := p.Header.Date()
	if err != nil || date.Before(before) || date.After(time.Now()) {
		t.Errorf("Date %q (%v) not the time of sending", p.Header.Get("Date"), err)
	}
	if p.Body != m.Body {
		t.Errorf("decoded body differs from the rendered one:\n got %q\nwant %q", p.Body, m.Body)
	}
	// A line holding only "." and a 200+ character line survive intact.
	if !strings.Contains(p.Body, "\n.\n") || !strings.Contains(p.Body, strings.Repeat("x", 200)) {
		t.Errorf("output tail damaged in transit:\n%s", p.Body)
	}
	// Quoted-printable keeps body lines within 76 characters.
	_, rawBody, _ := strings.Cut(string(got.Data), "\r\n\r\n")
	for _, line := range strings.Split(rawBody, "\r\n") {
		if len(line) > 76 {
			t.Errorf("raw body line of %d characters: %q", len(line), line)
		}
	}
}

func TestSendWrongPasswordFails(t *testing.T) {
	be := &backend{user: "relayuser", pass: "s3cret"}
	addr, cfg := startServer(t, be, true)
	r := tlsRelay(addr, cfg)
	r.Password = "wrong"

	err := r.Send(context.Background(), Render("owner@tenant.example", sampleEvent()))
	if err == nil {
		t.Fatal("Send with a wrong password succeeded")
	}
	// A wrong relay password concerns every mail and the operator can fix
	// it: the outbox must retry, not drop the delivery.
	var pe *PermanentError
	if errors.As(err, &pe) {
		t.Errorf("auth failure reported as permanent: %v", err)
	}
	if n := len(be.messages()); n != 0 {
		t.Errorf("relay received %d messages", n)
	}
}

func TestSendRequiresStartTLS(t *testing.T) {
	be := &backend{}
	addr, _ := startServer(t, be, false) // offers no STARTTLS
	r := tlsRelay(addr, nil)
	r.Username, r.Password = "", ""

	err := r.Send(context.Background(), Render("owner@tenant.example", sampleEvent()))
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("Send to a relay without STARTTLS: %v, want a STARTTLS error", err)
	}
	if n := len(be.messages()); n != 0 {
		t.Errorf("relay received %d messages in clear text", n)
	}
}

func TestSendPlainOnLoopback(t *testing.T) {
	be := &backend{}
	addr, _ := startServer(t, be, false)
	r := Relay{Addr: addr, From: "cron@platform.example", Timeout: 10 * time.Second}

	if err := r.Send(context.Background(), Render("owner@tenant.example", sampleEvent())); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n := len(be.messages()); n != 1 {
		t.Fatalf("relay received %d messages, want 1", n)
	}
}

func TestSendRefusesCleartextConfigurations(t *testing.T) {
	for name, r := range map[string]Relay{
		"no TLS to a remote relay": {Addr: "192.0.2.1:25", From: "cron@platform.example"},
		"password without TLS":     {Addr: "127.0.0.1:25", From: "cron@platform.example", Username: "u", Password: "p"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := r.Send(ctx, Render("owner@tenant.example", sampleEvent())); err == nil {
				t.Fatal("Send succeeded")
			}
		})
	}
}

func TestSendRejections(t *testing.T) {
	for _, tt := range []struct {
		name      string
		be        *backend
		permanent bool
	}{
		{"550 to RCPT", &backend{rcptErr: &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}}, true},
		{"554 to DATA", &backend{dataErr: &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "rejected"}}, true},
		{"451 to RCPT", &backend{rcptErr: &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"}}, false},
		{"452 to DATA", &backend{dataErr: &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 3, 1}, Message: "full"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, cfg := startServer(t, tt.be, true)
			r := tlsRelay(addr, cfg)
			r.Username, r.Password = "", ""
			err := r.Send(context.Background(), Render("owner@tenant.example", sampleEvent()))
			if err == nil {
				t.Fatal("Send succeeded")
			}
			var pe *PermanentError
			if errors.As(err, &pe) != tt.permanent {
				t.Errorf("permanent = %v, want %v: %v", !tt.permanent, tt.permanent, err)
			}
			var se *smtp.SMTPError
			if !errors.As(err, &se) {
				t.Errorf("the relay's answer is not reachable through the error: %v", err)
			}
		})
	}
}

func TestHeaderInjection(t *testing.T) {
	be := &backend{}
	addr, cfg := startServer(t, be, true)
	r := tlsRelay(addr, cfg)
	r.Username, r.Password = "", ""

	e := sampleEvent()
	e.Kind = KindRunFailed
	e.JobName = "x\r\nBcc: evil@attacker.example\r\nX-Injected: 1\r\n\r\nbody"
	e.FailureReason = "y\nX-Injected: 2\u2028Bcc: evil@attacker.example"
	e.TenantID = "t\r\nX-Injected: 3"
	m := Render("owner@tenant.example", e)
	// A subject made elsewhere is made safe by Send as well.
	m2 := m
	m2.Subject = "raw\r\nX-Injected: 4\nBcc: evil@attacker.example"
	m2.ID = "hostcron-event-43"

	for _, msg := range []Message{m, m2, RenderDigest("owner@tenant.example", e.TenantID, []Event{e})} {
		if err := r.Send(context.Background(), msg); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	msgs := be.messages()
	if len(msgs) != 3 {
		t.Fatalf("relay received %d messages, want 3", len(msgs))
	}
	for _, got := range msgs {
		if !slices.Equal(got.To, []string{"owner@tenant.example"}) {
			t.Errorf("envelope recipients %q", got.To)
		}
		p := parse(t, got.Data)
		if keys := headerKeys(p.Header); !slices.Equal(keys, wantHeaders) {
			t.Errorf("headers %q, want %q", keys, wantHeaders)
		}
		if s := decodedSubject(t, p.Header); strings.ContainsAny(s, "\r\n") {
			t.Errorf("decoded subject holds a line break: %q", s)
		}
		if strings.Contains(p.Body, "\nX-Injected") || strings.Contains(p.Body, "\nBcc:") {
			t.Errorf("tenant text starts a line of its own in the body:\n%s", p.Body)
		}
	}
}

func TestSendRefusesBadRecipients(t *testing.T) {
	be := &backend{}
	addr, cfg := startServer(t, be, true)
	r := tlsRelay(addr, cfg)
	r.Username, r.Password = "", ""
	for _, to := range []string{
		"owner@tenant.example\r\nBcc: evil@attacker.example",
		"owner@tenant.example\nBcc: evil@attacker.example",
		"owner@tenant.example, evil@attacker.example",
		"Owner <owner@tenant.example>",
		"<owner@tenant.example>",
		"\"Evil\r\n\" <owner@tenant.example>",
		"not an address",
		"",
		"ówner@tenant.example",
	} {
		err := r.Send(context.Background(), Render(to, sampleEvent()))
		var pe *PermanentError
		if !errors.As(err, &pe) {
			t.Errorf("To %q: %v, want a permanent error", to, err)
		}
	}
	if n := len(be.messages()); n != 0 {
		t.Errorf("relay received %d messages", n)
	}
}

// silentRelay accepts connections and never says a word.
func silentRelay(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestSendGivesUpOnSilentRelay(t *testing.T) {
	addr := silentRelay(t)
	base := Relay{Addr: addr, From: "cron@platform.example", StartTLS: true}
	for _, tt := range []struct {
		name    string
		relay   Relay
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{"ctx deadline", base, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"ctx cancel", base, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"relay timeout", func() Relay { r := base; r.Timeout = 200 * time.Millisecond; return r }(),
			func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			context.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			err := tt.relay.Send(ctx, Render("owner@tenant.example", sampleEvent()))
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Send took %v", took)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// --- rendering ---

func TestRenderSubjects(t *testing.T) {
	for kind, want := range map[string]string{
		KindRunFailed:      `[hostcron] Job "nightly backup" failed`,
		KindRecovered:      `[hostcron] Job "nightly backup" recovered`,
		KindDisableWarning: `[hostcron] Job "nightly backup" will be disabled after one more failure`,
		KindAutoDisabled:   `[hostcron] Job "nightly backup" was disabled after repeated failures`,
		KindLost:           `[hostcron] Job "nightly backup": a run was lost`,
		"something_new":    `[hostcron] Job "nightly backup": something_new`,
	} {
		e := sampleEvent()
		e.Kind = kind
		if got := Render("a@b.example", e).Subject; got != want {
			t.Errorf("%s: subject %q, want %q", kind, got, want)
		}
	}
	e := sampleEvent()
	e.JobName = ""
	if got := Render("a@b.example", e).Subject; !strings.Contains(got, `"cj-7"`) {
		t.Errorf("unnamed job: subject %q does not name the job id", got)
	}
}

func TestRenderBody(t *testing.T) {
	e := sampleEvent()
	e.OutputTail = "ok\r\n\x1b[31mred\x1b[0m\x00\xff\n"
	m := Render("a@b.example", e)
	for _, want := range []string{
		"One more failure in a row", "nightly backup", "cj-7", "*/5 * * * *",
		"2026-11-22T16:00:00Z", "exit status 2", "4 of 5 allowed",
		"ok\n\\x1b[31mred\\x1b[0m\\x00\uFFFD\n",
	} {
		if !strings.Contains(m.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, m.Body)
		}
	}
	if m.ID != "hostcron-event-42" || m.To != "a@b.example" {
		t.Errorf("ID %q To %q", m.ID, m.To)
	}
	if again := Render("a@b.example", e); again != m {
		t.Error("rendering the same event twice differs")
	}
}

func TestRenderDigest(t *testing.T) {
	var events []Event
	for i := range 3 {
		e := sampleEvent()
		e.ID = int64(100 + i)
		e.Kind = KindRunFailed
		events = append(events, e)
	}
	m := RenderDigest("a@b.example", "t-1", events)
	if m.Subject != "[hostcron] 3 notifications held for t-1" {
		t.Errorf("subject %q", m.Subject)
	}
	if n := strings.Count(m.Body, "run_failed"); n != 3 {
		t.Errorf("body lists %d events, want 3:\n%s", n, m.Body)
	}
	if strings.Contains(m.Body, "disk full") {
		t.Error("digest carries output tails")
	}
	reversed := slices.Clone(events)
	slices.Reverse(reversed)
	if RenderDigest("a@b.example", "t-1", reversed).ID != m.ID {
		t.Error("digest ID depends on the order of its events")
	}
	if RenderDigest("a@b.example", "t-1", events[:2]).ID == m.ID {
		t.Error("digests of different events share an ID")
	}
	many := slices.Repeat(events, 100)
	if body := RenderDigest("a@b.example", "t-1", many).Body; !strings.Contains(body, "... and 200 more") {
		t.Errorf("long digest not cut:\n%s", body[len(body)-300:])
	}
}

func TestEncodeSubjectLongUTF8(t *testing.T) {
	s := encodeSubject(strings.Repeat("ü€", 300) + "\r\nBcc: x")
	for _, line := range strings.Split(s, "\r\n") {
		if len(line) > 78 {
			t.Errorf("subject line of %d octets", len(line))
		}
		if line != "" && line != strings.TrimLeft(line, " ") && !strings.HasPrefix(line, " =?") {
			t.Errorf("continuation line %q is not a folded encoded-word", line)
		}
	}
	dec, err := new(mime.WordDecoder).DecodeHeader(strings.ReplaceAll(s, "\r\n", ""))
	if err != nil || strings.ContainsAny(dec, "\r\n") || !strings.HasPrefix(dec, "ü€ü€") {
		t.Errorf("decoded %q, %v", dec, err)
	}
}
