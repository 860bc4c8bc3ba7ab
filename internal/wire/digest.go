package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
)

// DesiredDigest is what GET /internal/v1/nodes/{node}/desired-digest
// answers: the SetDigest of the node's desired set as the core holds it
// now, and how many jobs it has. A node whose last converge planned
// nothing for a set with this digest, and whose units have not changed
// since, has nothing to do (the converge fast path, docs/semantics.md,
// "Converge fast path").
type DesiredDigest struct {
	Digest string `json:"digest"`
	Jobs   int    `json:"jobs"`
}

// DesiredDigestCursor is the cursor a desired-digest answer is signed
// for (trust.PageRequest.After, with Limit 0): no job id looks like it
// and no page has limit 0, so a signed digest never verifies as a page,
// nor a page as a digest.
const DesiredDigestCursor = "digest"

// SetDigest is a SHA-256 over every job of a desired set as it travels
// (its JSON), in id order: two sets digest alike only if every job a node
// would render from them is the same. NotBefore keeps the offset it came
// with, since the spec a node writes keeps it too (the review: in UTC, a
// core replica in another time zone would digest alike a set whose specs
// a full converge rewrites). Core and node
// compute it from the same type, so a node that read the set in pages and
// the core that reads it whole agree when the contents do; a core and a
// node of different versions that disagree cost only the fast path (a
// full converge runs), never a skipped change. Jobs is not changed.
func SetDigest(jobs []Job) string {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(jobs[a].ID, jobs[b].ID) })
	h := sha256.New()
	enc := json.NewEncoder(h) // one line per job: the encoder ends each with '\n'
	for _, i := range order {
		if err := enc.Encode(jobs[i]); err != nil {
			// A Job of plain values always encodes; if one ever did
			// not, no digest may match another.
			return "unencodable: " + err.Error()
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
