package trust

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// DefaultDeniedNames are users and groups a cron job never runs as, even
// with a uid or gid above the floor: each one is root or close to it.
var DefaultDeniedNames = []string{"root", "sudo", "adm", "wheel", "shadow", "disk", "docker", "systemd-journal", "lxd"}

// DefaultIDFloor is the lowest uid and gid a cron job may run as (Debian's
// first regular user).
const DefaultIDFloor = 1000

// Policy is what a node admits, whatever a signed payload says: the last
// line if the core, its key or its database is wrong.
type Policy struct {
	// StorageDir is this node's shard storage dir; every webroot and lock
	// dir must be below {StorageDir}/{tenant}/.
	StorageDir string
	// MinUID and MinGID are the floors (0 means DefaultIDFloor; root can
	// never be admitted).
	MinUID, MinGID uint32
	// Denied overrides DefaultDeniedNames when non-nil.
	Denied []string
	// LookupUID and LookupGID resolve names (os/user on a node, fakes in
	// tests).
	LookupUID func(name string) (uint32, error)
	LookupGID func(name string) (uint32, error)
	// LookupGroups names every group a user is in: systemd runs User=
	// with its supplementary groups (initgroups), so a tenant account in
	// a privileged group would carry it into the job.
	LookupGroups func(user string) ([]string, error)
}

// ErrNotAdmitted is wrapped by every refusal of Admit and AdmitUnit.
var ErrNotAdmitted = errors.New("not admitted")

// Admit reports why the node must not apply job, or nil.
func Admit(job wire.Job, p Policy) error {
	if err := AdmitUnit(job.UnitName()); err != nil {
		return err
	}
	if err := admitAccount(job.User, p.minUID(), p.LookupUID, p.denied()); err != nil {
		return refuse(job, "user", err)
	}
	if err := admitAccount(job.Group, p.minGID(), p.LookupGID, p.denied()); err != nil {
		return refuse(job, "group", err)
	}
	if err := admitMemberships(job.User, p.LookupGroups, p.LookupGID, p.denied()); err != nil {
		return refuse(job, "user's groups", err)
	}
	if err := admitPaths(job, p.StorageDir); err != nil {
		return refuse(job, "paths", err)
	}
	return nil
}

// AdmitUnit accepts only a name the node would have rendered,
// cron-{tenant}-{uuid}: RemoveUnits and RunNow receive bare names.
func AdmitUnit(name string) error {
	tenant, id, ok := wire.SplitUnitName(name)
	if !ok {
		return fmt.Errorf("unit %q: %w: not cron-{tenant}-{uuid}", name, ErrNotAdmitted)
	}
	if !units.ValidTenant(tenant) || !wire.ValidID(id) || wire.UnitName(tenant, id) != name {
		return fmt.Errorf("unit %q: %w: invalid tenant or job id", name, ErrNotAdmitted)
	}
	return nil
}

func refuse(job wire.Job, what string, err error) error {
	return fmt.Errorf("job %s of tenant %q: %s: %w: %v", job.ID, job.Tenant, what, ErrNotAdmitted, err)
}

func admitAccount(name string, floor uint32, lookup func(string) (uint32, error), denied []string) error {
	if !units.ValidUser(name) {
		return fmt.Errorf("%q is not a valid name", name)
	}
	for _, d := range denied {
		if name == d {
			return fmt.Errorf("%q is a privileged account", name)
		}
	}
	if lookup == nil {
		return fmt.Errorf("no lookup configured for %q", name)
	}
	id, err := lookup(name)
	if err != nil {
		return fmt.Errorf("look up %q: %v", name, err)
	}
	if id == 0 || id < floor {
		return fmt.Errorf("%q has id %d, below the floor %d", name, id, floor)
	}
	return nil
}

// admitMemberships refuses a user that is a member of a denied group or
// of gid 0. Other groups below the floor (Debian's "users", 100) are
// common and harmless, so the floor does not apply here.
func admitMemberships(user string, groups func(string) ([]string, error), gid func(string) (uint32, error), denied []string) error {
	if groups == nil || gid == nil {
		return fmt.Errorf("no group membership lookup configured for %q", user)
	}
	names, err := groups(user)
	if err != nil {
		return fmt.Errorf("groups of %q: %v", user, err)
	}
	for _, g := range names {
		for _, d := range denied {
			if g == d {
				return fmt.Errorf("%q is a member of the privileged group %q", user, g)
			}
		}
		if id, err := gid(g); err != nil || id == 0 {
			return fmt.Errorf("%q is a member of group %q (gid 0 or unknown: %v)", user, g, err)
		}
	}
	return nil
}

// admitPaths requires the job's storage dir to be the node's own, and the
// webroot to be the tenant's directory there or below it; the lock dir
// is derived from both, so it follows.
func admitPaths(job wire.Job, storageDir string) error {
	if storageDir == "" || !units.ValidPath(storageDir) {
		return fmt.Errorf("node storage dir %q is not configured or invalid", storageDir)
	}
	if path.Clean(job.WebStorageDir) != path.Clean(storageDir) {
		return fmt.Errorf("storage dir %q is not this node's %q", job.WebStorageDir, storageDir)
	}
	tenantDir := path.Clean(storageDir) + "/" + job.Tenant + "/"
	if !units.ValidPath(job.Webroot) || !strings.HasPrefix(job.Webroot+"/", tenantDir) {
		return fmt.Errorf("webroot %q is outside %s", job.Webroot, tenantDir)
	}
	if lock := job.LockDir(); !units.ValidPath(lock) || !strings.HasPrefix(lock, tenantDir) {
		return fmt.Errorf("lock dir %q is outside %s", lock, tenantDir)
	}
	return nil
}

func (p Policy) minUID() uint32 { return floorOr(p.MinUID) }
func (p Policy) minGID() uint32 { return floorOr(p.MinGID) }

func floorOr(v uint32) uint32 {
	if v == 0 {
		return DefaultIDFloor
	}
	return v
}

func (p Policy) denied() []string {
	if p.Denied != nil {
		return p.Denied
	}
	return DefaultDeniedNames
}

// Partition splits an ApplyJobs batch into the jobs the node admits and
// the reasons for the others, so one refused job neither blocks nor rides
// along with the rest.
func Partition(jobs []wire.Job, p Policy) (admitted []wire.Job, refused []string) {
	p = p.memoized()
	for _, j := range jobs {
		if err := Admit(j, p); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		admitted = append(admitted, j)
	}
	return admitted, refused
}

// memoized is p with each lookup answered once per name: a set's jobs
// share few accounts (one a tenant), and on a node each lookup parses
// /etc/passwd or /etc/group (os/user without cgo), several times a job:
// about 3 s of a no-op converge of 10,000 jobs went there (issue 16).
// Used for one call's jobs, so an account changed meanwhile is seen by
// the next call, as when each job looked it up.
func (p Policy) memoized() Policy {
	p.LookupUID = memo(p.LookupUID)
	p.LookupGID = memo(p.LookupGID)
	p.LookupGroups = memo(p.LookupGroups)
	return p
}

// memo answers f's calls from the first answer (error included) for
// each name; nil stays nil (admitAccount refuses it).
func memo[T any](f func(string) (T, error)) func(string) (T, error) {
	if f == nil {
		return nil
	}
	type answer struct {
		v   T
		err error
	}
	seen := map[string]answer{}
	return func(name string) (T, error) {
		if a, ok := seen[name]; ok {
			return a.v, a.err
		}
		v, err := f(name)
		seen[name] = answer{v, err}
		return v, err
	}
}

// AdmitUnits checks every name of a RemoveUnits call.
func AdmitUnits(names []string) error {
	var errs []error
	for _, n := range names {
		errs = append(errs, AdmitUnit(n))
	}
	return errors.Join(errs...)
}

// AdmitAll is for Reconcile, which removes every unit not in its set: a
// refused job fails the whole call rather than count as absent, so a core
// that is wrong (or a node policy that is) cannot wipe a node by sending
// jobs the node refuses.
func AdmitAll(jobs []wire.Job, p Policy) error {
	if _, refused := Partition(jobs, p); len(refused) > 0 {
		return fmt.Errorf("reconcile refused, nothing changed: %s", strings.Join(refused, "; "))
	}
	return nil
}

// Validate checks the policy itself; a node agent calls it at start so a
// missing storage dir fails loudly instead of refusing every job.
func (p Policy) Validate() error {
	if p.StorageDir == "" || !units.ValidPath(p.StorageDir) {
		return fmt.Errorf("admission policy: storage dir %q is not a clean absolute path", p.StorageDir)
	}
	if p.LookupUID == nil || p.LookupGID == nil || p.LookupGroups == nil {
		return fmt.Errorf("admission policy: uid, gid and group membership lookups are required")
	}
	return nil
}
