package network

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Naming scheme.
//
//   - network namespace: "<NamePrefix>-<id>", bind-mounted at
//     /var/run/netns/<NamePrefix>-<id> (the same place `ip netns` uses);
//   - host-side veth: IfacePrefix(NamePrefix) + the slot as 5 lowercase hex
//     digits, e.g. "airlock0001f" for NamePrefix "airlock" and slot 31, or
//     "altest0001f" for NamePrefix "altest" (at most 10+5 = 15 characters,
//     the kernel's limit);
//   - sandbox-side veth: always "eth0" inside the namespace.
//
// IfacePrefix is NamePrefix cut to 10 characters. The firewall treats every
// interface whose name starts with IfacePrefix as a sandbox interface (fail
// closed: a stray veth with our prefix is filtered too), so managers running
// side by side need prefixes where neither IfacePrefix is a prefix of the
// other ("airlock" and "altest" are fine; "airlock" and "airlockx" are not).
const (
	// DefaultNamePrefix prefixes netns names of the real daemon.
	DefaultNamePrefix = "airlock"
	// NetNSDir is where named network namespaces are bind-mounted.
	NetNSDir = "/var/run/netns"
	// GuestIfName is the name of the sandbox-side veth inside the netns.
	GuestIfName = "eth0"
	// slotDigits is the number of hex digits of the slot in a veth name.
	slotDigits = 5
	// MaxSlot is the largest slot a veth name can encode.
	MaxSlot = 1<<(4*slotDigits) - 1
	// maxIfacePrefix keeps prefix+slot within IFNAMSIZ-1 (15) bytes.
	maxIfacePrefix = 15 - slotDigits
	// slotPrefixLen is the prefix length of every slot's block.
	slotPrefixLen = 30
)

// Errors callers may test with errors.Is. ErrInvalid marks user errors (bad
// id, slot, config); the rest describe state.
var (
	ErrInvalid  = errors.New("network: invalid argument")
	ErrExists   = errors.New("network: already exists")
	ErrNotFound = errors.New("network: not found")
)

// IfacePrefix returns the host veth name prefix for a NamePrefix.
func IfacePrefix(namePrefix string) string {
	if len(namePrefix) > maxIfacePrefix {
		return namePrefix[:maxIfacePrefix]
	}
	return namePrefix
}

// HostIfName returns the host-side veth name of slot under namePrefix.
func HostIfName(namePrefix string, slot int) string {
	return fmt.Sprintf("%s%0*x", IfacePrefix(namePrefix), slotDigits, slot)
}

// NetNSName returns the netns name of sandbox id.
func NetNSName(namePrefix, id string) string {
	return namePrefix + "-" + id
}

// validateID accepts ids usable as a file name component.
func validateID(id string) error {
	if id == "" || len(id) > 200 {
		return fmt.Errorf("%w: sandbox id %q must be 1..200 characters", ErrInvalid, id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("%w: sandbox id %q contains %q", ErrInvalid, id, r)
		}
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%w: sandbox id %q", ErrInvalid, id)
	}
	return nil
}

// validateNamePrefix accepts prefixes made of lowercase letters and digits
// starting with a letter (they end up in interface and nftables names).
func validateNamePrefix(p string) error {
	if p == "" || len(p) > 32 {
		return fmt.Errorf("%w: name prefix %q must be 1..32 characters", ErrInvalid, p)
	}
	for i, r := range p {
		ok := r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9'
		if !ok {
			return fmt.Errorf("%w: name prefix %q must be lowercase letters and digits, starting with a letter", ErrInvalid, p)
		}
	}
	return nil
}

// normalize fills defaults and validates cfg.
func (c Config) normalize() (Config, error) {
	if !c.Subnet.IsValid() {
		c.Subnet = netip.MustParsePrefix(DefaultSubnet)
	}
	if c.NamePrefix == "" {
		c.NamePrefix = DefaultNamePrefix
	}
	if c.DNSPort == 0 {
		c.DNSPort = 53
	}
	if c.DenyOut == nil {
		c.DenyOut = DefaultDenyOut
	}
	var err error
	if c.DenyOut, err = masked4("deny list", c.DenyOut); err != nil {
		return c, err
	}
	if c.DenyOutExcept, err = masked4("deny list exception", c.DenyOutExcept); err != nil {
		return c, err
	}
	if err := validateNamePrefix(c.NamePrefix); err != nil {
		return c, err
	}
	if !c.Subnet.Addr().Is4() || c.Subnet.Bits() > slotPrefixLen {
		return c, fmt.Errorf("%w: subnet %s must be IPv4 and at most a /%d", ErrInvalid, c.Subnet, slotPrefixLen)
	}
	c.Subnet = c.Subnet.Masked()
	return c, nil
}

// endpointFor computes the endpoint of (id, slot) under a normalized config.
func endpointFor(cfg Config, id string, slot int) (*Endpoint, error) {
	if err := validateID(id); err != nil {
		return nil, err
	}
	if slot < 0 || slot > MaxSlot {
		return nil, fmt.Errorf("%w: slot %d out of range 0..%d", ErrInvalid, slot, MaxSlot)
	}
	host, guest, err := SlotAddrs(cfg.Subnet, slot)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Endpoint{
		ID:        id,
		Slot:      slot,
		NetNSPath: filepath.Join(NetNSDir, NetNSName(cfg.NamePrefix, id)),
		HostIf:    HostIfName(cfg.NamePrefix, slot),
		HostIP:    host,
		GuestIP:   guest,
		PrefixLen: slotPrefixLen,
	}, nil
}

// idFromNetNSName returns the sandbox id of a netns name, if it is ours.
func idFromNetNSName(namePrefix, name string) (string, bool) {
	id, ok := strings.CutPrefix(name, namePrefix+"-")
	if !ok || validateID(id) != nil {
		return "", false
	}
	return id, true
}

// masked4 returns a copy of ps with every prefix masked, or an error when
// one is not IPv4. The copy is never nil.
func masked4(what string, ps []netip.Prefix) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("%w: operator %s entry %s: want an IPv4 prefix", ErrInvalid, what, p)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
