package suite

import (
	"fmt"
	"regexp"
	"strings"
)

// The fixtures describe themselves as a tree of plain values, built once
// per registration when it is made: a node per fixture, a node per variant
// in it, and, on the nodes that play something, a play with its
// gather function and its rules' judges. Nothing in the tree knows a test
// framework. The engine (engine.go) walks it to certify without one;
// Register (ginkgo.go) walks it into Ginkgo containers and specs, which
// run the same gather functions and judges.

// node is one group of the tree: a fixture, or a variant in one, and, when
// it plays something, its play.
type node struct {
	// id is short and stable, unique among its siblings: the fixture's
	// id, or the variant's ("overlap", "panic"); name says the same in
	// words, for messages.
	id   string
	name string
	// fixture is set on a fixture's own node: its id.
	fixture string
	// play is what the node plays, nil for a node that only
	// groups others.
	play     *playNode
	children []*node
	parent   *node
}

// where names n's place below the registration, e.g.
// "concurrent-delivery / plain", for messages.
func (n *node) where() string {
	var names []string
	for p := n; p != nil && p.parent != nil; p = p.parent {
		names = append([]string{p.name}, names...)
	}
	return strings.Join(names, " / ")
}

// path is n's ids from the fixture down, e.g.
// "concurrent-delivery/overlap".
func (n *node) path() string {
	var ids []string
	for p := n; p != nil && p.parent != nil; p = p.parent {
		ids = append([]string{p.id}, ids...)
	}
	return strings.Join(ids, "/")
}

// plays returns the plays of n and every node below it, in the
// order they were described.
func (n *node) plays() []*playNode {
	var all []*playNode
	if n.play != nil {
		all = append(all, n.play)
	}
	for _, c := range n.children {
		all = append(all, c.plays()...)
	}
	return all
}

// describeFixture adds the node of fixture id to the tree, and what build
// describes in it. It is the only way a fixture enters the tree.
func (s *state) describeFixture(id string, build func()) {
	s.describeNode(&node{id: id, name: id, fixture: id}, build)
}

// group adds a node (a variant) below the one being described, and what
// build describes in it. id is the variant's short stable id, lower-case
// words joined by hyphens; name says it in words.
func (s *state) group(id, name string, build func()) {
	s.describeNode(&node{id: id, name: name}, build)
}

// variantID is what a variant's id looks like.
var variantID = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

func (s *state) describeNode(n *node, build func()) {
	if !variantID.MatchString(n.id) {
		panic(fmt.Sprintf("harmless: %q is not a variant id", n.id)) // a bug in the suite itself
	}
	for _, sib := range s.building.children {
		if sib.id == n.id {
			panic(fmt.Sprintf("harmless: two variants %q below %q", n.id, s.building.where())) // a bug in the suite itself
		}
	}
	n.parent = s.building
	s.building.children = append(s.building.children, n)
	s.building = n
	defer func() { s.building = n.parent }()
	build()
}

// attach makes pn the play of the node being described.
func (s *state) attach(pn *playNode) {
	n := s.building
	if n == nil || n.parent == nil {
		panic(fmt.Sprintf("harmless: play %s described outside a fixture", pn.name)) // a bug in the suite itself
	}
	if n.play != nil {
		panic(fmt.Sprintf("harmless: %q has two plays, %s and %s", n.where(), n.play.name, pn.name)) // a bug in the suite itself
	}
	n.play = pn
	pn.node = n
}

// build describes every fixture of the list (fixtureList, catalog.go),
// in its order, in a fresh tree. Each fixture's method, in the fixture's
// file beside its definition, adds the fixture's node.
func (s *state) build() {
	s.root = &node{}
	s.building = s.root
	for _, f := range fixtureList() {
		f.describe(s)
	}
	s.building = nil
}
