package trust

import (
	"fmt"
	"os/user"
	"strconv"
)

// NodePolicy is the policy a node agent uses: its shard's storage dir,
// the default floors and deny list, the system's user and group database.
func NodePolicy(storageDir string) Policy {
	return Policy{StorageDir: storageDir, LookupUID: LookupUID, LookupGID: LookupGID, LookupGroups: LookupGroups}
}

// LookupGroups names the groups a user is in, primary and supplementary,
// as initgroups() gives them to a service (NSS).
func LookupGroups(name string) ([]string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of %q: %w", name, err)
	}
	names := make([]string, 0, len(gids))
	for _, id := range gids {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return nil, fmt.Errorf("group %s of %q: %w", id, name, err)
		}
		names = append(names, g.Name)
	}
	return names, nil
}

// LookupUID resolves a user name through the system (NSS).
func LookupUID(name string) (uint32, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("user %q: %w", name, err)
	}
	return parseID(u.Uid)
}

// LookupGID resolves a group name through the system (NSS).
func LookupGID(name string) (uint32, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", name, err)
	}
	return parseID(g.Gid)
}

func parseID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("id %q: %w", s, err)
	}
	return uint32(v), nil
}
