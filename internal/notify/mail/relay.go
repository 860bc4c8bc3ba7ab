package mail

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	netmail "net/mail"
	"os"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// DefaultTimeout bounds a whole SMTP conversation when Relay.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Relay is the operator's SMTP relay.
type Relay struct {
	Addr      string // host:port
	From      string // envelope and header From
	Username  string // AUTH PLAIN when set; never sent without TLS
	Password  string
	StartTLS  bool          // require STARTTLS (the default in config); false only for a relay on loopback
	TLSConfig *tls.Config   // nil: system roots, ServerName from Addr
	Timeout   time.Duration // whole conversation (default 30 s)
	HeloName  string        // default os.Hostname
}

// PermanentError is a failure that retrying the same message cannot cure:
// the relay answered the mail transaction (MAIL, RCPT, DATA) with a 5xx
// code, or the message itself is unusable (a To that is not one plain
// address). Failures of the relay as a whole (connect, TLS, a 5xx to AUTH
// for a wrong password) are not permanent: they concern every mail and the
// operator can fix them, so the outbox should retry.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap gives the cause (often a *smtp.SMTPError).
func (e *PermanentError) Unwrap() error { return e.Err }

// Send delivers m through the relay. Errors are wrapped with context; a 5xx
// answer is distinguishable from a temporary failure via errors.As to *PermanentError.
func (r Relay) Send(ctx context.Context, m Message) error {
	to, err := CheckAddress(m.To)
	if err != nil {
		return &PermanentError{Err: fmt.Errorf("mail to %q: %w", m.To, err)}
	}
	from, err := netmail.ParseAddress(r.From)
	if err != nil {
		return fmt.Errorf("mail relay: From %q: %w", r.From, err)
	}
	host, err := r.checkTransport()
	if err != nil {
		return err
	}
	data, err := compose(from, to, m, time.Now())
	if err != nil {
		return &PermanentError{Err: fmt.Errorf("mail to %s: %w", to, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	return r.converse(ctx, host, from.Address, to, data)
}

// checkTransport refuses a configuration that would put mail or a password
// on the network in clear text, and gives the relay's host name.
func (r Relay) checkTransport() (string, error) {
	host, _, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return "", fmt.Errorf("mail relay: address %q: %w", r.Addr, err)
	}
	if !r.StartTLS && !isLoopback(host) {
		return "", fmt.Errorf("mail relay %s: STARTTLS may be off only for a relay on loopback", r.Addr)
	}
	if !r.StartTLS && r.Username != "" {
		return "", fmt.Errorf("mail relay %s: refusing to authenticate without TLS (StartTLS is off)", r.Addr)
	}
	return host, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r Relay) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

func (r Relay) heloName() string {
	if r.HeloName != "" {
		return r.HeloName
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

// converse runs one SMTP session. go-smtp sets and then clears a deadline
// around every command, so a deadline put on the conn once would not hold;
// instead the client's own timeouts are set to what is left of ctx and the
// conn is closed the moment ctx ends, which also unblocks a DATA write that
// no command timeout covers.
func (r Relay) converse(ctx context.Context, host, from, to string, data []byte) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.Addr)
	if err != nil {
		return fmt.Errorf("mail relay %s: dial: %w", r.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, err := r.open(ctx, conn, host)
	if err != nil {
		conn.Close()
		return r.fail(ctx, "connect", err)
	}
	defer c.Close()
	if err := r.auth(c); err != nil {
		return r.fail(ctx, "auth", err)
	}
	if err := transact(c, from, to, data); err != nil {
		return r.fail(ctx, "", err)
	}
	// The message is accepted once DATA is answered; a failed QUIT loses
	// nothing, and reporting it would make the outbox send the mail twice.
	_ = c.Quit()
	return nil
}

// open greets the relay and, when required, switches to TLS before anything
// else is said.
func (r Relay) open(ctx context.Context, conn net.Conn, host string) (*smtp.Client, error) {
	var (
		c   *smtp.Client
		err error
	)
	if r.StartTLS {
		// go-smtp's STARTTLS path says EHLO before TLS with its default
		// name; HeloName is used for the EHLO that counts, inside TLS.
		c, err = smtp.NewClientStartTLS(conn, r.tlsConfig(host))
		if err != nil {
			return nil, fmt.Errorf("starttls: %w", err)
		}
	} else {
		c = smtp.NewClient(conn)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.CommandTimeout = time.Until(dl)
		c.SubmissionTimeout = time.Until(dl)
	}
	if err := c.Hello(r.heloName()); err != nil {
		c.Close()
		return nil, fmt.Errorf("ehlo: %w", err)
	}
	return c, nil
}

func (r Relay) tlsConfig(host string) *tls.Config {
	var cfg *tls.Config
	if r.TLSConfig != nil {
		cfg = r.TLSConfig.Clone()
	} else {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	return cfg
}

// auth logs in with PLAIN, and only over TLS: checkTransport already refuses
// the configuration, this refuses the connection in case STARTTLS somehow
// did not take.
func (r Relay) auth(c *smtp.Client) error {
	if r.Username == "" {
		return nil
	}
	if _, ok := c.TLSConnectionState(); !ok {
		return errors.New("refusing to send credentials without TLS")
	}
	if !c.SupportsAuth(sasl.Plain) {
		return errors.New("relay does not offer AUTH PLAIN")
	}
	return c.Auth(sasl.NewPlainClient("", r.Username, r.Password))
}

// transact is the mail transaction proper: the only stage whose 5xx answers
// are about this message rather than the relay.
func transact(c *smtp.Client, from, to string, data []byte) error {
	if err := c.Mail(from, nil); err != nil {
		return permanentIf5xx(fmt.Errorf("MAIL FROM: %w", err))
	}
	if err := c.Rcpt(to, nil); err != nil {
		return permanentIf5xx(fmt.Errorf("RCPT TO: %w", err))
	}
	w, err := c.Data()
	if err != nil {
		return permanentIf5xx(fmt.Errorf("DATA: %w", err))
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return fmt.Errorf("DATA write: %w", err)
	}
	if err := w.Close(); err != nil {
		return permanentIf5xx(fmt.Errorf("end of DATA: %w", err))
	}
	return nil
}

func permanentIf5xx(err error) error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 && se.Code < 600 {
		return &PermanentError{Err: err}
	}
	return err
}

// fail adds the relay to err and, when ctx ended the conversation (the conn
// was closed under the client), says so: "use of closed network connection"
// alone would hide the cause.
func (r Relay) fail(ctx context.Context, stage string, err error) error {
	prefix := "mail relay " + r.Addr
	if stage != "" {
		prefix += ": " + stage
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w (%w)", prefix, ctxErr, err)
	}
	var pe *PermanentError
	if errors.As(err, &pe) {
		return &PermanentError{Err: fmt.Errorf("%s: %w", prefix, pe.Err)}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// CheckAddress accepts exactly one bare address ("a@example.com") a
// tenant may have mail sent to: no display name, no list, no control
// characters, ASCII only (go-smtp would need SMTPUTF8 from the relay
// otherwise), and a domain that is a dotted host name: never an address
// literal (a@[10.0.0.5]) or a single label (a@localhost), which most
// relays deliver to directly and so into the platform's own network. It
// gives the address as it is to be used.
func CheckAddress(s string) (string, error) {
	if strings.IndexFunc(s, isBreaking) >= 0 {
		return "", errors.New("address holds control characters")
	}
	a, err := netmail.ParseAddress(s)
	if err != nil {
		return "", fmt.Errorf("not one address: %w", err)
	}
	if a.Name != "" || a.Address != strings.TrimSpace(s) {
		return "", errors.New("not a plain address (no display name or angle brackets)")
	}
	if !isASCII(a.Address) {
		return "", errors.New("non-ASCII address not supported")
	}
	if err := checkDomain(a.Address[strings.LastIndexByte(a.Address, '@')+1:]); err != nil {
		return "", err
	}
	return a.Address, nil
}

// checkDomain accepts a public-looking host name: two or more labels of
// letters, digits and inner hyphens, a top-level label that is not all
// digits (so no dotted IPv4 address either).
func checkDomain(d string) error {
	labels := strings.Split(d, ".")
	if len(d) > 253 || len(labels) < 2 {
		return fmt.Errorf("domain %q: must be a host name with a dot, not an address literal or a single label", d)
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' || strings.Trim(l, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			return fmt.Errorf("domain %q: label %q is not a host name label", d, l)
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("domain %q: an IP address is not a mail domain", d)
	}
	return nil
}

// compose builds the whole message: headers, blank line, quoted-printable
// body, CRLF line ends throughout (go-smtp's DATA writer dot-stuffs it).
func compose(from *netmail.Address, to string, m Message, now time.Time) ([]byte, error) {
	id, err := messageID(m.ID, from.Address)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("From", from.String())
	header("To", to)
	header("Subject", encodeSubject(m.Subject))
	header("Date", now.UTC().Format(time.RFC1123Z))
	header("Message-ID", "<"+id+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	// RFC 3834: no vacation or out-of-office answers to machine mail.
	header("Auto-Submitted", "auto-generated")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	if _, err := qp.Write([]byte(strings.ToValidUTF8(m.Body, "\uFFFD"))); err != nil {
		return nil, fmt.Errorf("encode body: %w", err)
	}
	if err := qp.Close(); err != nil {
		return nil, fmt.Errorf("encode body: %w", err)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return b.Bytes(), nil
}

// subjectMax bounds a subject in runes; with Q-encoding and folding every
// header line then stays far below the 998-octet limit.
const subjectMax = 200

// encodeSubject makes any subject a safe header value: controls become
// spaces, non-ASCII is RFC 2047 Q-encoded, and the encoded-words are folded
// onto lines of their own (whitespace between encoded-words is not part of
// the text, so folding there changes nothing a reader sees).
func encodeSubject(s string) string {
	enc := mime.QEncoding.Encode("utf-8", headerText(s, subjectMax))
	return strings.ReplaceAll(enc, "?= =?", "?=\r\n =?")
}

// messageID completes an ID without host with the From domain and refuses
// one that could break the header.
func messageID(id, from string) (string, error) {
	if id == "" {
		return "", errors.New("message has no ID")
	}
	if !strings.Contains(id, "@") {
		id += "@" + from[strings.LastIndexByte(from, '@')+1:]
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '<' || c == '>' {
			return "", fmt.Errorf("message ID %q: invalid character", id)
		}
	}
	return id, nil
}
