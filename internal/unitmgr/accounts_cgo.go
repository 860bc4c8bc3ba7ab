//go:build cgo && !osusergo

package unitmgr

// accountsFromFiles: with cgo, os/user asks the C library, which may ask
// NSS (LDAP, sssd): accounts that change with no file the fast path's
// fingerprint reads. Such a build converges in full every time.
const accountsFromFiles = false
