// Package pgtest gives each test its own database in the throwaway
// PostgreSQL cluster that `make test` starts (scripts/pg.sh).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/store"
)

// EnvDSN names the admin DSN of the test cluster.
const EnvDSN = "HOSTCRON_TEST_DATABASE_URL"

// New creates a fresh, migrated database and returns a store on it. Without
// a cluster the test is skipped, except in CI, where that is a failure.
func New(t testing.TB) *store.Store {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set; run the tests through `make test`", EnvDSN)
		}
		t.Skipf("%s not set (make test starts a cluster)", EnvDSN)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to test cluster: %v", err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "hc_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvDSN, err)
	}
	u.Path = "/" + name
	st, err := store.Open(ctx, u.String(), 40)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}
