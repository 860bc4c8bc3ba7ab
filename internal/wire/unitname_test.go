package wire

import "testing"

func TestSplitUnitName(t *testing.T) {
	const id = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"
	for _, tt := range []struct {
		name, tenant, id string
		ok               bool
	}{
		{UnitName("acme", id), "acme", id, true},
		{UnitName("a-b", id), "a-b", id, true},
		{"cron-" + id, "", "", false},           // no tenant
		{"acme-" + id, "", "", false},           // no prefix
		{"cron-acme_" + id, "", "", false},      // no dash before the id
		{"cron-acme-" + id[:35], "", "", false}, // id too short to leave a tenant
	} {
		tenant, gotID, ok := SplitUnitName(tt.name)
		if tenant != tt.tenant || gotID != tt.id || ok != tt.ok {
			t.Errorf("SplitUnitName(%q) = %q, %q, %v; want %q, %q, %v", tt.name, tenant, gotID, ok, tt.tenant, tt.id, tt.ok)
		}
	}
}
