package store

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"testing"
)

// released are the migrations databases may already have applied, by
// name with the start of their SHA-256. tern applies by number, so a
// migration that is renamed, renumbered or edited after it shipped leaves
// those databases unable to migrate (or silently without it). New
// migrations are appended here once they land on main; none is changed.
var released = []struct{ name, sha string }{
	{"001_schema.sql", "6a62baae109b3d12"},
	{"002_history_updates.sql", "be1e64262a4d12fe"},
	{"003_dispatch.sql", "ea3560da05889c48"},
	{"004_cron_job_rev.sql", "5ce4863e4a277b1a"},
	{"005_sweep_from_nodes.sql", "920b3158b5412380"},
	{"006_sweep_old_writers.sql", "274044e2ecd6bb91"},
	{"007_cron_job_requeued_at.sql", "45d5851066f96ea1"},
	{"008_credentials.sql", "5b0267ed1e659198"},
	{"009_tenant_quotas.sql", "819142c4c584dfe4"},
	{"010_job_events.sql", "3ab4061d3310952e"},
	{"011_sweep_due_at.sql", "71f6da9c83aaff1c"},
	{"012_runs_tenants_see.sql", "0e2da23240813ad6"},
	{"013_notifications.sql", "32bb91a2509c5e31"},
	{"014_notification_leases.sql", "4abbd07a8c7d68a4"},
	{"015_job_environment.sql", "6ac4eb89ba75743e"},
	{"016_cancel_runs.sql", "535817ac8ca0c7ec"},
	{"017_operator_notifications.sql", "04b2a5281f87dbe4"},
	{"018_run_usage.sql", "0af0c1638eae549b"},
	{"019_run_starts.sql", "9edaaedc6964cd2d"},
	{"020_run_output_tail.sql", "2bc505994a751b3f"},
	{"021_deleted_job_history.sql", "bfff870a7c37beed"},
	{"022_catchup.sql", "0643ca1df2452d98"},
	{"023_validate_run_trigger.sql", "cdeb5bbf8df9fa0b"},
	{"024_overlap_policy.sql", "72ace726b52e5d4d"},
	{"025_retries.sql", "052827a250da9fa0"},
	{"026_run_start_trigger.sql", "dcc99c930a339865"},
	{"027_partition_runs.sql", "2ff9ff9a1fb500b2"},
	{"028_cron_jobs_trigger_when.sql", "5e7b08f1ce947bff"},
	{"029_run_identity_columns.sql", "a0c652777d5ef95e"},
	{"030_run_now_quota.sql", "9adc45fe999f3054"},
	{"031_failures_from.sql", "cb67f417375d2873"},
}

func TestReleasedMigrationsNeverChange(t *testing.T) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < len(released) {
		t.Fatalf("%d migrations, %d released: a released one is gone", len(entries), len(released))
	}
	for i, r := range released {
		if entries[i].Name() != r.name {
			t.Errorf("migration %d is %s, released as %s: append new migrations, never renumber", i+1, entries[i].Name(), r.name)
			continue
		}
		b, err := fs.ReadFile(migrations, "migrations/"+r.name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:])[:16]; got != r.sha {
			t.Errorf("%s changed after release (sha256 %s…, was %s…): add a new migration instead", r.name, got, r.sha)
		}
	}
}
