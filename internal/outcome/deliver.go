package outcome

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// Spooled is one undelivered report on disk, with its own retry state:
// one report the API keeps refusing never holds up the others.
type Spooled struct {
	JobID       string       `json:"job_id"`
	Report      wire.Outcome `json:"report"`
	SpooledAt   time.Time    `json:"spooled_at"`
	Attempts    int          `json:"attempts"`
	NextAttempt time.Time    `json:"next_attempt"`
	LastError   string       `json:"last_error,omitempty"`
}

// ErrPermanent marks an answer that will not change on retry (a 4xx other
// than 401, 403, 408 and 429): the report goes to the dead-letter directory.
var ErrPermanent = errors.New("rejected by the core API")

// Delivery bounds.
const (
	// MaxSpoolAge is how long a report is retried before it is dead-lettered.
	MaxSpoolAge = 24 * time.Hour
	// BackoffBase and BackoffCap bound the wait between two attempts of one report.
	BackoffBase = 5 * time.Second
	BackoffCap  = 10 * time.Minute
	// DeadLetterDir is the spool's subdirectory of reports given up on;
	// no report in it is ever deleted, an operator decides (only a
	// killed writer's temporary file that holds none is: TempMaxAge).
	DeadLetterDir = "dead"
	// TempMaxAge is the age from which a temporary file in the spool or
	// in DeadLetterDir is a leftover of a writer killed mid-write, and a
	// pass keeps the report it holds or removes it (removeStaleTemps): a
	// hook writes a report in milliseconds, so a younger one may be a hook
	// writing right now.
	TempMaxAge = 10 * time.Minute
	// maxDeadLetters bounds the dead letters of one spool name (keepDead).
	maxDeadLetters = 1000
)

// Client posts reports to the core API as one node.
type Client struct {
	BaseURL    string
	Credential string
	HTTP       *http.Client
}

// Post delivers one report.
func (c Client) Post(ctx context.Context, jobID string, r wire.Outcome) error {
	return c.post(ctx, "/internal/v1/cron-jobs/"+jobID+"/outcome", "outcome", r)
}

// PostStart tells the core a run of the job is running on this node
// (display only: a lost start costs the "running" view, never a record).
func (c Client) PostStart(ctx context.Context, jobID string, st wire.RunStart) error {
	return c.post(ctx, "/internal/v1/cron-jobs/"+jobID+"/started", "start", st)
}

// post sends v as JSON to path with the node's credential; a 4xx the
// API means for good is ErrPermanent.
func (c Client) post(ctx context.Context, path, what string, v any) error {
	body, err := marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s request: %w", what, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Credential)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", what, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case permanentStatus(resp.StatusCode):
		return fmt.Errorf("post %s: %d %s: %w", what, resp.StatusCode, bytes.TrimSpace(msg), ErrPermanent)
	default:
		return fmt.Errorf("post %s: %d %s", what, resp.StatusCode, bytes.TrimSpace(msg))
	}
}

// permanentStatus: a 4xx is the API's final word on this report, except
// the ones about the node's credential or the API's load.
func permanentStatus(code int) bool {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return code >= 400 && code < 500
}

// SpoolName is a report's file name in the spool: derived from the job id
// the hook got from its unit and the validated run key, never from free
// record text, so a tenant can neither pick a path nor collide with
// another job's report. Spooling the same run twice keeps one copy.
func SpoolName(jobID, runKey string) string {
	sum := sha256.Sum256([]byte(jobID + "\n" + runKey))
	return hex.EncodeToString(sum[:16]) + ".json"
}

// Spool stores a report durably for later delivery, replacing a report
// of the same run spooled before: the hooks of one job are one unit's
// ExecStopPost, which systemd runs to its end before the unit can start
// again, so a later Spool of a run key always holds the newer report (a
// redelivery in flight posts a claimed copy and never writes the name:
// Redeliver).
func Spool(dir, jobID string, r wire.Outcome) error {
	if k, err := runkey.Parse(r.RunKey); err != nil || k.JobID != jobID {
		return fmt.Errorf("spool: run key %q is not one of job %s", r.RunKey, jobID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	now := time.Now().UTC()
	return writeSpooled(filepath.Join(dir, SpoolName(jobID, r.RunKey)), Spooled{JobID: jobID, Report: r, SpooledAt: now, NextAttempt: now})
}

// SpoolDead keeps a report the core refused for good (ErrPermanent) in
// the dead-letter dir, beside the ones redelivery gave up on: the run
// happened, and its outcome must not vanish with a log line. It is
// written whole and durably to a temporary file in the spool, then
// moved into the dead-letter dir, never in place of another dead letter
// (atomicfile.WriteAndMove, keepDead).
func SpoolDead(dir, jobID string, r wire.Outcome, why error) error {
	if k, err := runkey.Parse(r.RunKey); err != nil || k.JobID != jobID {
		return fmt.Errorf("dead-letter: run key %q is not one of job %s", r.RunKey, jobID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	now := time.Now().UTC()
	s := Spooled{JobID: jobID, Report: r, SpooledAt: now, Attempts: 1, NextAttempt: now}
	if why != nil {
		s.LastError = why.Error()
	}
	b, err := marshal(s)
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	name := SpoolName(jobID, r.RunKey)
	keep := func(tmp string) error { return keepDead(dir, tmp, name) }
	if err := atomicfile.WriteAndMove(filepath.Join(dir, name), b, 0o600, keep); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// marshal is json.Marshal without HTML escaping: json.Marshal writes each
// '<', '>' and '&' of a tail in six bytes, and a tail of them would make
// a report, and each spooled one, six times the tail's size. Without it
// no byte of a tail (wire.OutputTail) takes more than two in JSON.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func writeSpooled(path string, s Spooled) error {
	b, err := marshal(s)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// Backoff is the wait before attempt n+1 after n failed ones: exponential
// from BackoffBase up to BackoffCap, with jitter in [50%, 100%] (jitter is
// a number in [0, 1)) so that a node's reports do not all retry at once.
func Backoff(attempts int, jitter float64) time.Duration {
	d := BackoffCap
	if attempts < 20 {
		d = min(BackoffBase<<max(attempts-1, 0), BackoffCap)
	}
	return time.Duration(float64(d) * (0.5 + jitter/2))
}

// Verdict is what becomes of a spooled report after one attempt.
type Verdict int

// Verdicts.
const (
	Delivered  Verdict = iota // accepted (or a duplicate): remove
	Retry                     // keep, try again after Backoff
	DeadLetter                // move to DeadLetterDir
)

// Decide is the pure delivery rule: a report is given up on only for a
// permanent answer or after MaxSpoolAge; a 5xx or a network error never
// loses it.
func Decide(postErr error, spooledAt, now time.Time) Verdict {
	switch {
	case postErr == nil:
		return Delivered
	case errors.Is(postErr, ErrPermanent), now.Sub(spooledAt) > MaxSpoolAge:
		return DeadLetter
	}
	return Retry
}

// Stats counts what one Redeliver pass did.
type Stats struct {
	Delivered, Retrying, DeadLettered, Waiting int
	// TempsRemoved counts the temporary files of killed writers the pass
	// removed (removeStaleTemps).
	TempsRemoved int
}

// Redeliver tries every spooled report that is due, each on its own: a
// failing report is rescheduled with its own backoff, never blocking the
// rest. Backoff must not delay recovery after an outage, though: when no
// report is due, the one due soonest is tried anyway (one request a pass),
// and once any report is delivered the API is up, so every waiting report
// is tried at once.
//
// A hook may spool a newer report of the same run (same file name) while
// a pass posts the older one: each report is claimed (renamed to a name
// only Redeliver uses) before it is posted, and afterwards only that
// claimed copy is removed, dead-lettered or put back, never the name a
// hook writes (see claim). One pass at a time holds the spool (an flock
// on its directory), so a claim found when a pass starts is one a crash
// left, and it is put back and delivered. A pass also clears the
// temporary files killed writers left (removeStaleTemps).
func Redeliver(ctx context.Context, c Client, dir string, now time.Time) (Stats, error) {
	var st Stats
	unlock, err := lockSpool(dir)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil // nothing was ever spooled
	}
	if err != nil {
		return st, err
	}
	defer unlock()
	// Claims first: a leftover kept as a report must never take the name
	// a claimed report goes back to (putBack would take it for newer), so
	// leftovers wait for a pass that put every claim back.
	errs := recoverClaims(dir)
	if len(errs) == 0 {
		errs = removeStaleTemps(dir, now, &st)
	}
	items, lerrs := loadSpool(dir, now, &st)
	errs = append(errs, lerrs...)
	due, waiting := splitDue(items, now)
	if len(due) == 0 && len(waiting) > 0 {
		due, waiting = waiting[:1], waiting[1:] // probe
	}
	for _, it := range due {
		if ctx.Err() != nil {
			return st, errors.Join(errs...)
		}
		if err := attempt(ctx, c, dir, it, now, &st); err != nil {
			errs = append(errs, err)
		}
	}
	if st.Delivered == 0 {
		st.Waiting = len(waiting)
		return st, errors.Join(errs...)
	}
	for _, it := range waiting { // the API answers: no reason to wait
		if ctx.Err() != nil {
			break
		}
		if err := attempt(ctx, c, dir, it, now, &st); err != nil {
			errs = append(errs, err)
		}
	}
	return st, errors.Join(errs...)
}

// lockSpool takes the spool for one Redeliver pass: an exclusive flock on
// the directory itself (no lock file: the spool's every file is a
// report), not waited for. The agent's one redelivery loop is the only
// caller; the lock makes a second one (another goroutine, a second agent
// started by hand) skip its pass instead of taking a claim in flight for
// a crash's leftover.
func lockSpool(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("redeliver: %w", err)
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		d.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("redeliver: another redelivery holds the spool %s", dir)
		}
		return nil, fmt.Errorf("redeliver: lock %s: %w", dir, err)
	}
	return func() { d.Close() }, nil // closing the descriptor lets the flock go
}

// removeStaleTemps clears the temporary files (atomicfile.TempPrefix) a
// writer killed between their creation and their rename left in the spool
// and in DeadLetterDir (atomicfile's own removal never runs on a SIGKILL):
// a hook's, or a pass's. One that holds a whole report of its job (the
// writer died after its fsync) is kept as that report (keepTemp); one
// that holds no report (a part, or no spool file's) is removed; one that
// cannot be read or kept now is left for the next pass. Those younger
// than TempMaxAge are left alone: one may be a hook writing right now, and
// the spool's lock does not hold hooks. A clock stepped forward can still
// make a live hook's file look old; its writer then writes it again
// (atomicfile.WriteAndMove).
func removeStaleTemps(dir string, now time.Time, st *Stats) []error {
	var errs []error
	for _, d := range []string{dir, filepath.Join(dir, DeadLetterDir)} {
		entries, err := os.ReadDir(d)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("redeliver: %w", err))
			}
			continue
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if err != nil || !staleTemp(e.Name(), fi.ModTime(), now) {
				continue // gone meanwhile, or not a leftover
			}
			switch err := keepTemp(dir, d, e.Name()); {
			case errors.Is(err, fs.ErrNotExist): // its writer renamed it after all
			case errors.Is(err, errNoReport):
				if err := os.Remove(filepath.Join(d, e.Name())); err == nil {
					st.TempsRemoved++
				} else if !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("redeliver: remove a leftover: %w", err))
				}
			case err != nil:
				errs = append(errs, fmt.Errorf("redeliver: a leftover report stays for the next pass: %w", err))
			}
		}
	}
	return errs
}

// errNoReport: a temporary file holds no report (a part of one, or no
// spool file's), and can go.
var errNoReport = errors.New("no report")

// keepTemp keeps a writer's leftover temporary file name in d (the spool
// dir or its DeadLetterDir) that holds a whole report of its job as that
// report, in d, under the name it was written for or the next free one
// (keepUnder): in the spool a second report of the run beside one that
// took the name since (either may be the newer; the core keeps what each
// says, in either order), in DeadLetterDir a dead letter. One whose name
// is not its report's (no writer names it so: a damaged or planted file)
// is kept as evidence only, a dead letter under its report's name. A
// pass's own leftovers (claimed copies) are recoverClaims' business.
func keepTemp(dir, d, name string) error {
	base, ok := tempTarget(name)
	if !ok || strings.HasPrefix(base, claimPrefix) {
		return errNoReport
	}
	path := filepath.Join(d, name)
	s, bad, err := readSpooled(path)
	if err != nil {
		return err
	}
	if k, kerr := runkey.Parse(s.Report.RunKey); bad != nil || kerr != nil || k.JobID != s.JobID {
		return errNoReport
	}
	if own := SpoolName(s.JobID, s.Report.RunKey); base != own {
		return keepDead(dir, path, own)
	}
	return keepUnder(d, path, base)
}

// tempTarget is the name a temporary file was written for:
// "<TempPrefix><name>-<random>" (atomicfile), if name is a report's.
func tempTarget(tmp string) (string, bool) {
	rest, ok := strings.CutPrefix(tmp, atomicfile.TempPrefix)
	i := strings.LastIndexByte(rest, '-')
	if !ok || i < 0 || filepath.Ext(rest[:i]) != ".json" {
		return "", false
	}
	return rest[:i], true
}

// staleTemp is the pure rule of removeStaleTemps: a file named as a
// temporary file and not modified for TempMaxAge. A modification time
// ahead of now (the clock set back) keeps it.
func staleTemp(name string, modTime, now time.Time) bool {
	return strings.HasPrefix(name, atomicfile.TempPrefix) && now.Sub(modTime) >= TempMaxAge
}

// claimPrefix starts the name of a report Redeliver has claimed for one
// attempt: ".claimed-<spool name>", which still ends in .json, so the
// spool's counts and metrics (SpoolCounts, SpoolStats) count a report
// while it is being posted, and one a crash left claimed.
const claimPrefix = ".claimed-"

// claim takes the report under name for one attempt: a rename (atomic)
// to claimPrefix+name. A hook that spools the run again meanwhile
// creates a new file under name, which nothing of this attempt touches.
func claim(dir, name string) error {
	return os.Rename(filepath.Join(dir, name), filepath.Join(dir, claimPrefix+name))
}

// putBack returns a claimed report to its name for the next pass, unless
// a newer report of the same run took the name while it was claimed: the
// link refuses to replace it, and the claimed copy, the older, is dropped.
// The newer one supersedes it, as a hook's Spool replaces an older spooled
// report of its run anyway: the older is a first start's platform_error
// and the newer the run's real result, which the core takes in its place
// (decideRecord: a counted result or cancelled replaces platform_error;
// docs/semantics.md, "Delivery"). Link then remove: a crash between the
// two leaves the claim beside a name holding the same file, and the next
// pass (recoverClaims) removes the claim.
func putBack(dir, name string) error {
	claimed := filepath.Join(dir, claimPrefix+name)
	if err := os.Link(claimed, filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("redeliver %s: put back: %w", name, err) // stays claimed: the next pass retries
	}
	if err := os.Remove(claimed); err != nil {
		return fmt.Errorf("redeliver %s: put back: %w", name, err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("redeliver %s: put back: %w", name, err)
	}
	return nil
}

// recoverClaims puts back what a pass that died left claimed (the caller
// holds the spool's lock, so no claim is in flight): a claim is put back
// (putBack: dropped if a newer report of its run was spooled since) and
// then delivered as any spooled report. The temporary files of a retry
// state written to a claim are Redeliver's own (a hook never writes a
// claim), so they are removed: one left is a crash's, and never renamed.
func recoverClaims(dir string) []error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []error{fmt.Errorf("redeliver: %w", err)}
	}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, atomicfile.TempPrefix+claimPrefix) && e.Type().IsRegular():
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("redeliver: %w", err))
			}
		case strings.HasPrefix(n, claimPrefix) && e.Type().IsRegular():
			if err := putBack(dir, strings.TrimPrefix(n, claimPrefix)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// spoolItem is one decoded spool file.
type spoolItem struct {
	name string
	s    Spooled
}

// MaxSpooledBytes bounds one spooled report: the core refuses a body over
// 64 KiB, so a larger file can never be delivered, and every pass reads
// the whole spool into memory.
const MaxSpooledBytes = 128 << 10

// loadSpool decodes every report in dir; an undecodable or oversized one
// is dead-lettered.
func loadSpool(dir string, now time.Time, st *Stats) ([]spoolItem, []error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("redeliver: %w", err)}
	}
	var items []spoolItem
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".json" || strings.HasPrefix(e.Name(), claimPrefix) {
			continue
		}
		s, bad, err := readSpooled(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("redeliver %s: %w", e.Name(), err))
			continue
		}
		if bad != nil {
			if err := deadLetterBad(dir, e.Name(), st); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if s.SpooledAt.IsZero() { // written by an older hook: start its clock now
			s.SpooledAt = now
		}
		items = append(items, spoolItem{e.Name(), s})
	}
	return items, errs
}

// readSpooled reads one spool file; bad says why no pass could ever
// deliver it (larger than MaxSpooledBytes, undecodable).
func readSpooled(path string) (s Spooled, bad, err error) {
	f, err := os.Open(path)
	if err != nil {
		return s, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSpooledBytes+1))
	if err != nil {
		return s, nil, err
	}
	if len(b) > MaxSpooledBytes {
		fi, err := f.Stat()
		if err != nil {
			return s, nil, err
		}
		return s, fmt.Errorf("%d bytes, more than any report the core accepts (%d)", fi.Size(), MaxSpooledBytes), nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("undecodable: %w", err), nil
	}
	return s, nil, nil
}

// deadLetterBad dead-letters the undeliverable report loadSpool read
// under name: claimed first and read again, since a hook may have
// spooled a good report of the run under the name since, which is put
// back, not dead-lettered.
func deadLetterBad(dir, name string, st *Stats) error {
	if err := claim(dir, name); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("redeliver %s: %w", name, err)
	}
	_, bad, err := readSpooled(filepath.Join(dir, claimPrefix+name))
	if err != nil || bad == nil {
		return errors.Join(err, putBack(dir, name))
	}
	return deadLetter(dir, claimPrefix+name, name, bad, st)
}

// splitDue separates reports due now from those still backing off, the
// latter soonest first.
func splitDue(items []spoolItem, now time.Time) (due, waiting []spoolItem) {
	for _, it := range items {
		if now.Before(it.s.NextAttempt) {
			waiting = append(waiting, it)
		} else {
			due = append(due, it)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].s.NextAttempt.Before(waiting[j].s.NextAttempt) })
	return due, waiting
}

// attempt posts one report and acts on the verdict, on its claimed copy
// only (claim): a newer report of the run spooled during the post is
// neither removed nor overwritten, and is delivered by a later pass. It
// posts what it claimed, which may be newer than what loadSpool read.
func attempt(ctx context.Context, c Client, dir string, it spoolItem, now time.Time, st *Stats) error {
	if err := claim(dir, it.name); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // no longer spooled
		}
		return fmt.Errorf("redeliver %s: %w", it.name, err)
	}
	claimed := filepath.Join(dir, claimPrefix+it.name)
	s, bad, err := readSpooled(claimed)
	if err != nil {
		return errors.Join(fmt.Errorf("redeliver %s: %w", it.name, err), putBack(dir, it.name))
	}
	if bad != nil {
		return deadLetter(dir, claimPrefix+it.name, it.name, bad, st)
	}
	if s.SpooledAt.IsZero() { // written by an older hook: start its clock now
		s.SpooledAt = now
	}
	postErr := c.Post(ctx, s.JobID, s.Report)
	switch Decide(postErr, s.SpooledAt, now) {
	case Delivered:
		st.Delivered++
		if err := os.Remove(claimed); err != nil {
			return fmt.Errorf("redeliver %s: %w", it.name, err)
		}
		return nil
	case DeadLetter:
		return deadLetter(dir, claimPrefix+it.name, it.name, postErr, st)
	}
	st.Retrying++
	s.Attempts++
	s.NextAttempt = now.Add(Backoff(s.Attempts, rand.Float64()))
	s.LastError = postErr.Error()
	if err := writeSpooled(claimed, s); err != nil {
		// The claim keeps its previous state: put back as it was.
		return errors.Join(fmt.Errorf("redeliver %s: %w", it.name, err), putBack(dir, it.name))
	}
	return putBack(dir, it.name)
}

// deadLetter moves the report in file from out of the way, into
// DeadLetterDir (keepDead), keeping it for an operator. If it cannot, the
// report stays claimed, and the next pass puts it back (recoverClaims);
// st counts it only once it is there.
func deadLetter(dir, from, name string, why error, st *Stats) error {
	if err := keepDead(dir, filepath.Join(dir, from), name); err != nil {
		return fmt.Errorf("dead-letter %s: %w", name, err)
	}
	st.DeadLettered++
	return fmt.Errorf("outcome %s dead-lettered: %w", name, why)
}

// keepDead moves the file at from into dir's DeadLetterDir (keepUnder),
// never in place of a dead letter there: two reports of one run can both
// be given up on (a hook's refused with a 4xx, a later one of the run
// after MaxSpoolAge), and each is evidence.
func keepDead(dir, from, name string) error {
	dead := filepath.Join(dir, DeadLetterDir)
	if err := os.MkdirAll(dead, 0o700); err != nil {
		return err
	}
	return keepUnder(dead, from, name)
}

// keepUnder moves the file at from into d under the first free one of
// name, <base>.2.json, <base>.3.json, ... (all end in .json: SpoolCounts
// counts them, loadSpool reads them), never in place of a file there.
// The move never replaces (atomicfile.RenameNoReplace), so writers racing
// for one name never both get it.
//
// Where the filesystem makes that move a link then a removal, a crash or
// an error between the two leaves the report both where it was (spooled,
// claimed, or a temporary file) and in d: duplicate evidence, and the
// core keeps one record per run key if both are delivered. Never none.
// Past maxDeadLetters names (something gives one run up over and over) it
// fails, and the report stays where it was.
func keepUnder(d, from, name string) error {
	base := strings.TrimSuffix(name, ".json")
	for n := 1; n <= maxDeadLetters; n++ {
		to := name
		if n > 1 {
			to = fmt.Sprintf("%s.%d.json", base, n)
		}
		if err := atomicfile.RenameNoReplace(from, filepath.Join(d, to)); !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return fmt.Errorf("%s already has %d copies in %s; kept where it is", name, maxDeadLetters, d)
}

// SpoolCounts returns how many reports wait in the spool and how many were
// dead-lettered, for `node-agent state`.
func SpoolCounts(dir string) (pending, dead int) {
	count := func(d string) int {
		n := 0
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.Type().IsRegular() && filepath.Ext(e.Name()) == ".json" {
				n++
			}
		}
		return n
	}
	return count(dir), count(filepath.Join(dir, DeadLetterDir))
}

// SpoolStats reads the spool for the agent's metrics: the reports waiting,
// the dead letters, and when the oldest waiting report was first spooled
// (zero: none waits; a report it cannot decode counts by its file's time,
// as the next redelivery dead-letters it). It reads every waiting report,
// as each redelivery pass does.
func SpoolStats(dir string) (pending, dead int, oldest time.Time, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, time.Time{}, fmt.Errorf("spool stats: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		at, ok := spooledAt(filepath.Join(dir, e.Name()))
		if !ok {
			continue // delivered meanwhile
		}
		pending++
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	_, dead = SpoolCounts(dir)
	return pending, dead, oldest, nil
}

// spooledAt is when a spool file's report was first spooled; ok is false
// when the file is gone.
func spooledAt(path string) (time.Time, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	var s Spooled
	if json.Unmarshal(b, &s) == nil && !s.SpooledAt.IsZero() {
		return s.SpooledAt, true
	}
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}, false
	}
	return fi.ModTime(), true
}
