package gossip

import (
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// RTT estimates the round-trip time between the members named a and b
// from serf's Vivaldi network coordinates, as this node last saw them
// (its own is current; another member's is the one it sent with its last
// answer to this node's probe). It reports false when either coordinate
// is not known yet: a member this node has not probed since it joined.
// Coordinates settle over a few dozen probes of each member.
func (n *Node) RTT(a, b string) (time.Duration, bool) {
	ca, ok := n.coordinate(a)
	if !ok {
		return 0, false
	}
	cb, ok := n.coordinate(b)
	if !ok || !ca.IsCompatibleWith(cb) {
		return 0, false
	}
	return ca.DistanceTo(cb), true
}

func (n *Node) coordinate(name string) (*coordinate.Coordinate, bool) {
	if name == n.cfg.NodeName {
		c, err := n.serf.GetCoordinate()
		return c, err == nil && c != nil
	}
	c, ok := n.serf.GetCachedCoordinate(name)
	return c, ok && c != nil
}
