package main

import (
	"encoding/json"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/apiclient"
)

// keysCmd manages API keys (admin keys only). A secret is printed once,
// when a key is created or rotated.
func (a *app) keysCmd() *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "List, create, revoke and rotate API keys (admin)"}

	var tenantFilter string
	list := &cobra.Command{
		Use: "list", Short: "List keys without their secrets", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if tenantFilter != "" {
				q.Set("tenant_id", tenantFilter)
			}
			raw, err := a.client.Do(cmd.Context(), "GET", "/admin/api-keys", q, nil, nil)
			if err != nil {
				return err
			}
			var ks []apiclient.Key
			if err := apiclient.Decode(raw, "api_keys", &ks); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error {
				row(w, "ID", "SCOPE", "TENANT", "NAME", "READ-ONLY", "STATE")
				for _, k := range ks {
					row(w, k.ID, k.Scope, k.TenantID, k.Name, yesNo(k.ReadOnly), keyState(k, time.Now()))
				}
				return nil
			})
		},
	}
	list.Flags().StringVar(&tenantFilter, "for-tenant", "", "only this tenant's keys")

	var forTenant, name string
	var readOnly bool
	create := &cobra.Command{
		Use: "create", Short: "Create a key (an admin key without --for-tenant)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{"name": name, "read_only": readOnly}
			if forTenant != "" {
				body["tenant_id"] = forTenant
			}
			raw, err := a.client.Do(cmd.Context(), "POST", "/admin/api-keys", nil, body, nil)
			if err != nil {
				return err
			}
			return a.emitSecret(raw)
		},
	}
	create.Flags().StringVar(&forTenant, "for-tenant", "", "scope the key to this tenant")
	create.Flags().StringVar(&name, "name", "", "a label for people")
	create.Flags().BoolVar(&readOnly, "read-only", false, "the key may only read")

	revoke := &cobra.Command{
		Use: "revoke KEY", Short: "Stop a key at once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.client.Do(cmd.Context(), "POST", "/admin/api-keys/"+url.PathEscape(args[0])+"/revoke", nil, nil, nil)
			if err != nil {
				return err
			}
			var k apiclient.Key
			if err := apiclient.Decode(raw, "", &k); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error {
				row(w, "ID", "STATE")
				row(w, k.ID, keyState(k, time.Now()))
				return nil
			})
		},
	}

	var grace time.Duration
	rotate := &cobra.Command{
		Use: "rotate KEY", Short: "Issue a replacement; the old key works for --grace more", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"grace_seconds": int64(grace / time.Second)}
			raw, err := a.client.Do(cmd.Context(), "POST", "/admin/api-keys/"+url.PathEscape(args[0])+"/rotate", nil, body, nil)
			if err != nil {
				return err
			}
			return a.emitSecret(raw)
		},
	}
	rotate.Flags().DurationVar(&grace, "grace", 0, "how long the old key keeps working (e.g. 24h)")

	keys.AddCommand(list, create, revoke, rotate)
	return keys
}

// emitSecret prints a new key with its secret, which is shown only now.
func (a *app) emitSecret(raw json.RawMessage) error {
	var k struct {
		apiclient.Key
		Secret string `json:"key"`
	}
	if err := apiclient.Decode(raw, "", &k); err != nil {
		return err
	}
	return a.emit(raw, func(w *tabwriter.Writer) error {
		row(w, "ID", "SCOPE", "TENANT", "KEY (shown once)")
		row(w, k.ID, k.Scope, k.TenantID, k.Secret)
		return nil
	})
}

// keyState says whether a key works, and until when.
func keyState(k apiclient.Key, now time.Time) string {
	switch {
	case k.RevokedAt != nil:
		return "revoked " + k.RevokedAt.UTC().Format(time.RFC3339)
	case k.ExpiresAt != nil && !k.ExpiresAt.After(now):
		return "expired " + k.ExpiresAt.UTC().Format(time.RFC3339)
	case k.ExpiresAt != nil:
		return "active until " + k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return "active"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return b
}
