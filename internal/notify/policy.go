package notify

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
)

// MaxURLLength bounds a webhook URL.
const MaxURLLength = 2048

// CheckURL validates a webhook URL a tenant registers: http or https with
// a host, no user info (credentials belong in the signature, not in a URL
// shown in listings), bounded. Unless allowPrivate (the operator's
// --notify-allow-private-targets), it must be https, and a literal IP
// must be public; names are checked after resolution, at every dial
// (AllowedIP), so DNS cannot bypass the rule.
func CheckURL(raw string, allowPrivate bool) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("at most %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("scheme must be https or http")
	case u.Scheme == "http" && !allowPrivate:
		return fmt.Errorf("scheme must be https")
	case u.User != nil:
		return fmt.Errorf("must not contain user info")
	case u.Hostname() == "":
		return fmt.Errorf("host is required")
	case u.Fragment != "":
		return fmt.Errorf("must not contain a fragment")
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !allowPrivate && !AllowedIP(ip) {
		return fmt.Errorf("address %s is not public", ip)
	}
	return nil
}

// AllowedIP reports whether a webhook may connect to ip without the
// operator's allowance: a global unicast address (so not loopback,
// link-local, which holds cloud metadata endpoints, unspecified or
// multicast) that is not private (RFC 1918, ULA, CGNAT), including those
// addresses mapped into IPv6, nor in a range that embeds or translates to
// an IPv4 address (6to4, Teredo, NAT64, IPv4-compatible) or is reserved.
func AllowedIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid(), !ip.IsGlobalUnicast(), ip.IsPrivate():
		return false
	}
	for _, p := range blocked {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// blocked are further ranges that are not the public internet.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	// IPv6 ranges that embed or translate to IPv4 (a private IPv4 inside),
	// or are not the internet.
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (::7f00:1 is 127.0.0.1)
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("2001::/32"),      // Teredo
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("2002::/16"),      // 6to4
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated, still routed inside some sites)
}

// AllowedAddr is AllowedIP of a dialed "host:port" (what a net.Dialer's
// Control sees: always a resolved IP).
func AllowedAddr(hostport string) bool {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		host, _, serr := net.SplitHostPort(hostport)
		if serr != nil {
			return false
		}
		ip, perr := netip.ParseAddr(host)
		return perr == nil && AllowedIP(ip)
	}
	return AllowedIP(ap.Addr())
}
