-- Credentials an operator can run: API keys get a name, a read-only flag,
-- an expiry (a rotated key keeps working until it) and a revocation time;
-- a node keeps its previous credential hash until a rotation's grace ends.
-- Rows are never deleted: who held which key stays answerable.
ALTER TABLE api_keys
    ADD COLUMN name        text NOT NULL DEFAULT '',
    ADD COLUMN read_only   boolean NOT NULL DEFAULT false,
    ADD COLUMN expires_at  timestamptz,
    ADD COLUMN revoked_at  timestamptz,
    ADD COLUMN replaced_by uuid REFERENCES api_keys(id);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

ALTER TABLE nodes
    ADD COLUMN previous_credential_hash       bytea UNIQUE,
    ADD COLUMN previous_credential_expires_at timestamptz,
    ADD COLUMN credential_rotated_at          timestamptz;
