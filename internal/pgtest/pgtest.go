// Package pgtest gives each test, and each end-to-end cluster, its own
// database in the throwaway PostgreSQL cluster that `make test` starts
// (scripts/with-pg.sh).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/store"
)

// EnvDSN names the admin DSN of the test cluster.
const EnvDSN = "HOSTCRON_TEST_DATABASE_URL"

// DB is a fresh, migrated database of its own.
type DB struct {
	DSN   string       // for a second process or pool on it (the harness's core)
	Store *store.Store // a store on it
	admin string
	name  string
}

// Create makes a database named prefix_<random> in the test cluster,
// migrates it and opens a store with up to maxConns connections. Drop
// removes it.
func Create(ctx context.Context, prefix string, maxConns int32) (*DB, error) {
	admin := os.Getenv(EnvDSN)
	if admin == "" {
		return nil, fmt.Errorf("%s not set; run under scripts/with-pg.sh", EnvDSN)
	}
	return CreateAt(ctx, admin, prefix, maxConns)
}

// CreateAt is Create in the cluster whose admin DSN is admin (a cluster of
// the caller's own, e.g. one a fault test stops).
func CreateAt(ctx context.Context, admin, prefix string, maxConns int32) (*DB, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return nil, fmt.Errorf("parse admin DSN: %w", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	d := &DB{admin: admin, name: prefix + "_" + hex.EncodeToString(b)}
	if err := d.adminExec(ctx, "CREATE DATABASE "+d.name); err != nil {
		return nil, fmt.Errorf("create test database: %w", err)
	}
	u.Path = "/" + d.name
	d.DSN = u.String()
	if d.Store, err = store.Open(ctx, d.DSN, maxConns); err != nil {
		d.Drop()
		return nil, err
	}
	if err := d.Store.Migrate(ctx); err != nil {
		d.Drop()
		return nil, err
	}
	return d, nil
}

// Drop closes the store and removes the database, whoever is still
// connected to it.
func (d *DB) Drop() {
	if d.Store != nil {
		d.Store.Close()
	}
	_ = d.adminExec(context.Background(), "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)")
}

func (d *DB) adminExec(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return fmt.Errorf("connect to test cluster: %w", err)
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// New creates a database for one test and returns a store on it; the
// database goes when the test ends. Without a cluster the test is
// skipped, except in CI, where that is a failure.
func New(t testing.TB) *store.Store { return NewDB(t).Store }

// NewDB is New for a test that also needs the database's DSN.
func NewDB(t testing.TB) *DB {
	t.Helper()
	if os.Getenv(EnvDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set; run the tests through `make test`", EnvDSN)
		}
		t.Skipf("%s not set (make test starts a cluster)", EnvDSN)
	}
	d, err := Create(context.Background(), "hc_test", 40)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Drop)
	return d
}
