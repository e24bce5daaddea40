package console

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// A page of another site can reach a console on a private address under
// its own name: its author's DNS answers first with the author's server
// and then, once the page is loaded, with the console's address (DNS
// rebinding). The browser then treats the console as the page's own
// origin, so neither the cross-origin check nor the form token stops the
// page: it reads the token and posts it. What the browser cannot hide is
// the name it believes it talks to: it sends it in the Host header. So the
// console serves only the host names it is told are its own, and, by
// default, only names no DNS answer decides: localhost and IP addresses.

// hostName is one name the console answers to: a lower-case host name
// without a trailing dot, or an IP address in its canonical form, and a
// port ("" for any).
type hostName struct {
	host string
	port string
}

// parseHost splits and normalizes a Host header value or an entry of
// Options.AllowedHosts: "name", "name:port", "1.2.3.4", "1.2.3.4:port",
// "[::1]", "[::1]:port". Names are compared without case and without a
// trailing dot; addresses by value ("[0::1]" is "[::1]"; an IPv4-mapped
// IPv6 address is its IPv4 address). ok is false for anything else,
// including a port that is not a decimal number from 1 to 65535 and a
// name with characters no DNS name has.
func parseHost(s string) (h hostName, ok bool) {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return hostName{}, false
		}
		host = s[1:end]
		switch rest := s[end+1:]; {
		case rest == "":
		case strings.HasPrefix(rest, ":"):
			port = rest[1:]
			if port == "" {
				return hostName{}, false
			}
		default:
			return hostName{}, false
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return hostName{}, false
		}
		host = a.Unmap().String()
	} else {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
			if port == "" || strings.IndexByte(host, ':') >= 0 {
				// "name:" or a bare IPv6 address: a Host header
				// puts an IPv6 address in brackets.
				return hostName{}, false
			}
		}
		if a, err := netip.ParseAddr(host); err == nil {
			host = a.Unmap().String()
		} else if host, ok = dnsName(host); !ok {
			return hostName{}, false
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] < '1' || port[0] > '9' {
			return hostName{}, false
		}
	}
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]"
	}
	return hostName{host: host, port: port}, true
}

// dnsName returns name in lower case without its trailing dot, if it is a
// DNS name: labels of letters, digits, hyphens and underscores, none empty.
func dnsName(name string) (string, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || len(name) > 253 {
		return "", false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return "", false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return name, true
}

// parseAllowedHosts checks and normalizes Options.AllowedHosts; nil for
// an empty list.
func parseAllowedHosts(list []string) ([]hostName, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := make([]hostName, 0, len(list))
	for _, s := range list {
		h, ok := parseHost(s)
		if !ok {
			return nil, fmt.Errorf("console: Options.AllowedHosts: %q is not a host name or IP address with an optional port (such as ops.example.com, ops.example.com:8443, 10.0.0.7 or [::1]:8080)", s)
		}
		out = append(out, h)
	}
	return out, nil
}

// hostAllowed reports whether the console answers to r's Host.
func (c *Console) hostAllowed(r *http.Request) bool {
	h, ok := parseHost(r.Host)
	if !ok {
		return false
	}
	if c.hosts == nil {
		// The default: names no DNS answer decides. Browsers resolve
		// "localhost" to a loopback address themselves, and an address
		// is the address the browser connects to.
		_, err := netip.ParseAddr(strings.Trim(h.host, "[]"))
		return err == nil || h.host == "localhost"
	}
	if h.port == "" {
		// A Host without a port names the scheme's default.
		h.port = "80"
		if r.TLS != nil {
			h.port = "443"
		}
	}
	for _, a := range c.hosts {
		if a.host == h.host && (a.port == "" || a.port == h.port) {
			return true
		}
	}
	return false
}

// refuseHost answers a request whose Host the console does not answer to.
// It is plain text, written before anything is read or rendered: no page,
// no token, nothing of the table.
func (c *Console) refuseHost(w http.ResponseWriter, r *http.Request) {
	c.log.Warn("leasework console: request refused: host not allowed", "host", r.Host, "method", r.Method, "path", r.URL.Path)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "leasework console: refused: this console does not answer to the host name %q.\n\n"+
		"A page of another site can reach a console under its own name (DNS rebinding), so a\n"+
		"console serves only the names it is given. To reach it by this name, add the name to\n"+
		"its allowed hosts: leasework ui -allow-host, or console.Options.AllowedHosts.\n", r.Host)
}
