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
// operator's allowance: not loopback, link-local (which holds cloud
// metadata endpoints), private (RFC 1918, ULA, CGNAT), unspecified or
// multicast, including those addresses mapped into IPv6.
func AllowedIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid(), ip.IsLoopback(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(),
		ip.IsInterfaceLocalMulticast(), ip.IsMulticast(), ip.IsPrivate(), ip.IsUnspecified():
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
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 reaches IPv4 private space
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
