//go:build !cgo || osusergo

package unitmgr

// accountsFromFiles: os/user in pure Go reads /etc/passwd and /etc/group
// only, which the fast path's fingerprint covers (the agent is built
// with CGO_ENABLED=0, see the Makefile).
const accountsFromFiles = true
