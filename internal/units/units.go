// Package units renders the systemd timer and service units of a cron job.
//
// Nothing a tenant types reaches a unit file: the command and working
// directory travel in the job spec (see package jobspec), which systemd hands
// to the runner as a credential. What the unit does carry, names, paths and
// calendar values, is checked here against strict patterns first, so no
// value can add a directive, expand a specifier or split into two words.
package units

import (
	"bytes"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
	unittemplates "github.com/hostcron/hostcron/templates/units"
)

// Paths are where the node keeps hostcron's programs and job specs.
type Paths struct {
	RunnerPath  string // ExecStart: the runner that takes the lock and runs the command
	OutcomePath string // ExecStopPost=+: reports the outcome
	SpecDir     string // one <unit>.json per job, root-only
}

// DefaultPaths are the paths the Debian package installs to.
var DefaultPaths = Paths{
	RunnerPath:  "/usr/local/bin/cron-run",
	OutcomePath: "/usr/local/bin/cron-outcome",
	SpecDir:     "/var/lib/hostcron/jobs",
}

// Job is what a unit pair needs to know about one cron job. It has no
// version: a unit file changes only when what systemd reads changes (the
// version lives in the job spec), so an edit of the command alone never
// costs a daemon-reload or a timer restart.
type Job struct {
	Tenant      string   // tenant name, part of the unit name
	ID          string   // cron job id (UUID), part of the unit name
	User, Group string   // the tenant's Linux user and group
	Webroot     string   // absolute path; WorkingDirectory and writable
	LockDir     string   // {webStorageDir}/{tenant}/.locks; writable
	OnCalendar  []string // from schedule.Schedule.OnCalendar
	TimeoutSec  int      // kill the run after this long
	// WaitSec is how long a start may wait before its command starts (a
	// catch-up's spread, an overlap policy's wait for the previous run;
	// jobspec.StartWaitSec): TimeoutStartSec is TimeoutSec + WaitSec, and
	// with WaitSec > 0 the runner enforces TimeoutSec from the command's
	// start, so a wait is never charged as the tenant's timeout.
	WaitSec     int
	MemoryMaxMB int // MemoryMax=
	// RandomizedDelaySec spreads one slot's timers over the nodes; see
	// DelayFor.
	RandomizedDelaySec int
	// Persistent: systemd fires a slot missed while the timer was not
	// running (a reboot, a stopped timer) as soon as it starts again; only
	// for a job with a catch-up window, whose runner decides whether the
	// slot still runs (docs/semantics.md, "Catch-up").
	Persistent bool
	// DenyAddresses are the node's control-plane addresses (IPs or CIDRs,
	// see ParseDenyAddress) the tenant's command must not reach; rendered
	// as IPAddressDeny=. They come from the node, not the job (see
	// desired.Node).
	DenyAddresses []string
}

// MaxRandomizedDelaySec is the delay of every schedule of a minute or more.
const MaxRandomizedDelaySec = 15

// DelayFor returns the random delay for a schedule whose fire times are at
// least minInterval apart: 15 s, but under half the interval, so a run can
// always tell which slot its timer fired for.
func DelayFor(minInterval time.Duration) int {
	d := int(minInterval / time.Second / 2)
	if d > MaxRandomizedDelaySec {
		return MaxRandomizedDelaySec
	}
	return max(d-1, 0)
}

var (
	tenantRE   = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	userRE     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	calendarRE = regexp.MustCompile(`^(?:[A-Z][a-z]{2}(?:\.\.[A-Z][a-z]{2})?(?:,[A-Z][a-z]{2}(?:\.\.[A-Z][a-z]{2})?)* )?\*-[0-9*,.]+-[0-9*,.]+ [0-9*,.]+:[0-9*,.]+:[0-9*,.]+ [A-Za-z][A-Za-z0-9_+/-]*$`)
)

// MaxTenantLen keeps unit names far below systemd's 255-byte limit.
const MaxTenantLen = 32

// ValidTenant reports whether name can be part of a unit name.
func ValidTenant(name string) bool {
	return len(name) <= MaxTenantLen && tenantRE.MatchString(name)
}

// ValidUser reports whether name is a safe Linux user or group name.
func ValidUser(name string) bool { return userRE.MatchString(name) }

// ValidPath reports whether p is an absolute, clean path of plain
// characters: no spaces, quotes, '%', '$', '\\', '.' or '..' elements.
func ValidPath(p string) bool {
	if len(p) > 1024 || p == "" || p[0] != '/' {
		return false
	}
	// One pass over the bytes: every job's render checks several paths,
	// and a regexp match was a third of a no-op converge's CPU at 10,000
	// jobs (issue 16). Each element, after its '/', is a non-empty run of
	// [A-Za-z0-9._-] other than "." and "..".
	start := 0 // index of the current element's '/'
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if !pathByte(p[i]) {
				return false
			}
			continue
		}
		if el := p[start+1 : i]; el == "" || el == "." || el == ".." {
			return false
		}
		start = i
	}
	return true
}

// pathByte: the characters ValidPath allows in an element.
func pathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// MaxDenyAddresses bounds IPAddressDeny=: a node has a handful of
// control-plane endpoints, and each entry is a BPF map entry per unit.
const MaxDenyAddresses = 64

// ParseDenyAddress parses one IPAddressDeny= entry: an IP address or a
// CIDR prefix and nothing else, so no systemd keyword ("any", "localhost",
// "link-local", ...) and no zone ("%eth0" would be a specifier) gets in. It
// returns the canonical form (prefix masked, IPv4-mapped IPv6 unmapped).
//
// A prefix that covers loopback is refused: IPAddressDeny= filters
// addresses, not ports, so it would cut the tenant off from the node's own
// MySQL or Redis on 127.0.0.1. So is a /0, which would deny every address.
func ParseDenyAddress(s string) (string, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return "", fmt.Errorf("deny address %q: %w", s, err)
		}
		if p.Addr().Is4In6() {
			return "", fmt.Errorf("deny address %q: write an IPv4-mapped prefix as IPv4", s)
		}
		p = p.Masked()
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return "", fmt.Errorf("deny address %q: want an IP address or a CIDR prefix: %w", s, err)
		}
		if a.Zone() != "" {
			return "", fmt.Errorf("deny address %q: no zone allowed", s)
		}
		a = a.Unmap()
		p = netip.PrefixFrom(a, a.BitLen())
	}
	switch {
	case p.Bits() == 0:
		return "", fmt.Errorf("deny address %q: a /0 denies every address", s)
	case p.Overlaps(netip.MustParsePrefix("127.0.0.0/8")) || p.Contains(netip.IPv6Loopback()):
		return "", fmt.Errorf("deny address %q: covers loopback, which the tenant's local databases use", s)
	}
	if p.IsSingleIP() {
		return p.Addr().String(), nil
	}
	return p.String(), nil
}

// Name is the unit name without suffix: cron-{tenant}-{id}.
func Name(tenant, id string) string { return wire.UnitName(tenant, id) }

// Name is the job's unit name without suffix.
func (j *Job) Name() string { return Name(j.Tenant, j.ID) }

// Validate checks every field that ends up in a unit file.
func (j *Job) Validate() error {
	switch {
	case !ValidTenant(j.Tenant):
		return fmt.Errorf("tenant name %q: want lower-case letters, digits and inner dashes, at most %d", j.Tenant, MaxTenantLen)
	case !wire.ValidID(j.ID):
		return fmt.Errorf("cron job id %q: want a lower-case UUID", j.ID)
	case !ValidUser(j.User):
		return fmt.Errorf("user %q: not a valid Linux user name", j.User)
	case !ValidUser(j.Group):
		return fmt.Errorf("group %q: not a valid Linux group name", j.Group)
	case !ValidPath(j.Webroot):
		return fmt.Errorf("webroot %q: want an absolute clean path of plain characters", j.Webroot)
	case !ValidPath(j.LockDir):
		return fmt.Errorf("lock directory %q: want an absolute clean path of plain characters", j.LockDir)
	case len(j.OnCalendar) == 0:
		return fmt.Errorf("no OnCalendar value")
	case j.TimeoutSec < 1 || j.TimeoutSec > 86400:
		return fmt.Errorf("timeout %ds: want 1 to 86400", j.TimeoutSec)
	case j.WaitSec < 0 || j.WaitSec > 2*86400:
		return fmt.Errorf("start wait %ds: want 0 to %d", j.WaitSec, 2*86400)
	case j.MemoryMaxMB < 16 || j.MemoryMaxMB > 65536:
		return fmt.Errorf("memory limit %d MB: want 16 to 65536", j.MemoryMaxMB)
	case j.RandomizedDelaySec < 0 || j.RandomizedDelaySec > MaxRandomizedDelaySec:
		return fmt.Errorf("randomized delay %ds: want 0 to %d", j.RandomizedDelaySec, MaxRandomizedDelaySec)
	}
	for _, v := range j.OnCalendar {
		if !calendarRE.MatchString(v) {
			return fmt.Errorf("OnCalendar value %q: not of the form hostcron renders", v)
		}
	}
	if len(j.DenyAddresses) > MaxDenyAddresses {
		return fmt.Errorf("%d deny addresses: want at most %d", len(j.DenyAddresses), MaxDenyAddresses)
	}
	for _, a := range j.DenyAddresses {
		canon, err := ParseDenyAddress(a)
		if err != nil {
			return err
		}
		// Only the canonical form is rendered: what the unit says is
		// exactly what was validated, and an equal list renders equal
		// bytes (no rewrite, no daemon-reload).
		if canon != a {
			return fmt.Errorf("deny address %q: write it as %q", a, canon)
		}
	}
	return nil
}

var templates = template.Must(template.New("units").Option("missingkey=error").
	Funcs(template.FuncMap{"join": strings.Join}).ParseFS(unittemplates.FS, "*.tmpl"))

// Initial buffer sizes of Render: a little above what the templates
// render for a job without deny addresses.
const (
	timerSizeHint   = 1024
	serviceSizeHint = 3072
)

// Rendered is the content of one job's unit pair.
type Rendered struct {
	Name    string // cron-{tenant}-{id}
	Timer   []byte
	Service []byte
}

// Render validates the job and renders its timer and service.
func Render(j Job, p Paths) (Rendered, error) {
	if err := j.Validate(); err != nil {
		return Rendered{}, fmt.Errorf("render units: %w", err)
	}
	for _, path := range []string{p.RunnerPath, p.OutcomePath, p.SpecDir} {
		if !ValidPath(path) {
			return Rendered{}, fmt.Errorf("render units: configured path %q is not a plain absolute path", path)
		}
	}
	name := Name(j.Tenant, j.ID)
	data := struct {
		Job
		Paths
		Name     string
		SpecPath string
		// StartTimeoutSec is TimeoutStartSec: the job's timeout and the
		// longest wait before its command.
		StartTimeoutSec int
	}{j, p, name, p.SpecDir + "/" + name + ".json", j.TimeoutSec + j.WaitSec}
	var timer, service bytes.Buffer
	// Sized for the templates' output (about 0.85 and 2.7 KB), so a
	// rendering is one allocation each rather than a buffer grown by
	// doubling from 64 bytes (issue 16: a converge renders 10,000 jobs,
	// twice when it writes them).
	timer.Grow(timerSizeHint)
	service.Grow(serviceSizeHint)
	if err := templates.ExecuteTemplate(&timer, "cron.timer.tmpl", data); err != nil {
		return Rendered{}, fmt.Errorf("render %s.timer: %w", name, err)
	}
	if err := templates.ExecuteTemplate(&service, "cron.service.tmpl", data); err != nil {
		return Rendered{}, fmt.Errorf("render %s.service: %w", name, err)
	}
	return Rendered{Name: name, Timer: timer.Bytes(), Service: service.Bytes()}, nil
}
