package placement

// nodeSet is a set of nodes with O(1) add, remove and random pick.
type nodeSet struct {
	nodes []*node
	pos   map[*node]int
}

func setFor(m map[string]*nodeSet, key string) *nodeSet {
	s := m[key]
	if s == nil {
		s = &nodeSet{pos: map[*node]int{}}
		m[key] = s
	}
	return s
}

func (s *nodeSet) add(n *node) {
	if _, ok := s.pos[n]; ok {
		return
	}
	s.pos[n] = len(s.nodes)
	s.nodes = append(s.nodes, n)
}

// remove is a no-op on a nil set or a node not in it.
func (s *nodeSet) remove(n *node) {
	if s == nil {
		return
	}
	i, ok := s.pos[n]
	if !ok {
		return
	}
	last := s.nodes[len(s.nodes)-1]
	s.nodes[i] = last
	s.pos[last] = i
	s.nodes = s.nodes[:len(s.nodes)-1]
	delete(s.pos, n)
}
