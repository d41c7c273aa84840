package gossip

import (
	"errors"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/serf/serf"
)

func TestParseRole(t *testing.T) {
	for _, r := range knownRoles {
		got, err := ParseRole(string(r))
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	for _, s := range []string{"", "Assigner", "worker", " task"} {
		if _, err := ParseRole(s); !errors.Is(err, ErrInvalidPeer) {
			t.Errorf("ParseRole(%q) error = %v, want ErrInvalidPeer", s, err)
		}
	}
	roles, err := ParseRoles("distributor, assigner,distributor")
	if err != nil || !slices.Equal(roles, []Role{RoleAssigner, RoleDistributor}) {
		t.Errorf("ParseRoles = %v, %v", roles, err)
	}
	if _, err := ParseRoles("assigner,,backup"); err == nil {
		t.Error("ParseRoles accepted an empty element")
	}
}

func TestStatusString(t *testing.T) {
	want := map[Status]string{StatusUnknown: "unknown", StatusAlive: "alive", StatusLeaving: "leaving",
		StatusLeft: "left", StatusFailed: "failed", Status(42): "unknown"}
	for s, w := range want {
		if s.String() != w {
			t.Errorf("Status(%d).String() = %q, want %q", int(s), s.String(), w)
		}
	}
}

func TestTagsRoundTrip(t *testing.T) {
	for _, p := range []Peer{
		{Roles: []Role{RoleAssigner}},
		{Roles: []Role{RoleAssigner, RoleBackup, RoleDistributor}, RPCAddr: "10.0.0.1:7070"},
		{Roles: []Role{RoleTask}, Job: "kv", Task: "kv-0", RPCAddr: "127.0.0.1:9000"},
		{Roles: []Role{RoleTask}, Job: "kv.prod_1", Task: "Pod:abc-1.x", RPCAddr: "[::1]:1"},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t"}, // not serving yet
		{Roles: []Role{RoleAssigner, RoleTask}, Job: "j", Task: "t", RPCAddr: "host.example:65535"},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", RPCAddr: "127.0.0.1:1", Capacity: 2},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", Capacity: 0.125},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", Capacity: 1000},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", MemoryLimit: 1 << 30},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", Capacity: 2, MemoryLimit: 1},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", RPCAddr: "127.0.0.1:1", Draining: true},
		{Roles: []Role{RoleAssigner, RoleDistributor}, RPCAddr: "127.0.0.1:1", Settling: true},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", Settling: true},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", RPCAddr: "127.0.0.1:8080", HandoffAddr: "127.0.0.1:8081"},
		{Roles: []Role{RoleTask}, Job: "j", Task: "t", RPCAddr: "127.0.0.1:8080", NoHandoff: true},
	} {
		tags, err := p.Tags()
		if err != nil {
			t.Fatalf("%+v.Tags(): %v", p, err)
		}
		m := serf.Member{Name: "n1", Addr: net.ParseIP("127.0.0.1"), Port: 7946, Tags: tags, Status: serf.StatusAlive}
		got, ok := ParseMember(m)
		if !ok {
			t.Fatalf("ParseMember rejected tags %v of %+v", tags, p)
		}
		want := p
		want.Name, want.GossipAddr, want.Status = "n1", "127.0.0.1:7946", StatusAlive
		if !peersEqual(got, want) {
			t.Errorf("round trip\n got %+v\nwant %+v", got, want)
		}
	}
}

func TestTagsNormaliseRoles(t *testing.T) {
	tags, err := Peer{Roles: []Role{RoleDistributor, RoleAssigner, RoleDistributor}}.Tags()
	if err != nil {
		t.Fatal(err)
	}
	if tags[tagRoles] != "assigner,distributor" {
		t.Errorf("roles tag = %q", tags[tagRoles])
	}
}

func TestTagsRejects(t *testing.T) {
	long := strings.Repeat("h", 300)
	for name, p := range map[string]Peer{
		"no roles":             {},
		"unknown role":         {Roles: []Role{"worker"}},
		"task without job":     {Roles: []Role{RoleTask}, Task: "t"},
		"task without task":    {Roles: []Role{RoleTask}, Job: "j"},
		"bad job name":         {Roles: []Role{RoleTask}, Job: "Job", Task: "t"},
		"bad task name":        {Roles: []Role{RoleTask}, Job: "j", Task: "t/1"},
		"job on non-task":      {Roles: []Role{RoleAssigner}, Job: "j"},
		"task on non-task":     {Roles: []Role{RoleDistributor}, Task: "t"},
		"rpc without port":     {Roles: []Role{RoleAssigner}, RPCAddr: "10.0.0.1"},
		"rpc empty host":       {Roles: []Role{RoleAssigner}, RPCAddr: ":8080"},
		"rpc port zero":        {Roles: []Role{RoleAssigner}, RPCAddr: "h:0"},
		"rpc port too big":     {Roles: []Role{RoleAssigner}, RPCAddr: "h:65536"},
		"rpc port not a num":   {Roles: []Role{RoleAssigner}, RPCAddr: "h:http"},
		"rpc host space":       {Roles: []Role{RoleAssigner}, RPCAddr: "a b:1"},
		"capacity negative":    {Roles: []Role{RoleTask}, Job: "j", Task: "t", Capacity: -1},
		"capacity too large":   {Roles: []Role{RoleTask}, Job: "j", Task: "t", Capacity: 1e4},
		"capacity on non-task": {Roles: []Role{RoleAssigner}, Capacity: 2},
		"memory negative":      {Roles: []Role{RoleTask}, Job: "j", Task: "t", MemoryLimit: -1},
		"memory too large":     {Roles: []Role{RoleTask}, Job: "j", Task: "t", MemoryLimit: 1 << 51},
		"memory on non-task":   {Roles: []Role{RoleDistributor}, MemoryLimit: 1 << 20},
		"draining non-task":    {Roles: []Role{RoleAssigner}, Draining: true},
		"handoff non-task":     {Roles: []Role{RoleAssigner}, HandoffAddr: "127.0.0.1:1"},
		"bad handoff address":  {Roles: []Role{RoleTask}, Job: "j", Task: "t", HandoffAddr: "nowhere"},
		"no handoff non-task":  {Roles: []Role{RoleAssigner}, NoHandoff: true},
		"handoff and none":     {Roles: []Role{RoleTask}, Job: "j", Task: "t", HandoffAddr: "127.0.0.1:1", NoHandoff: true},
		"tags too large": {Roles: []Role{RoleTask}, Job: strings.Repeat("j", 63), Task: strings.Repeat("t", 128),
			RPCAddr: long + ":1"},
	} {
		if _, err := p.Tags(); !errors.Is(err, ErrInvalidPeer) {
			t.Errorf("%s: Tags() error = %v, want ErrInvalidPeer", name, err)
		}
	}
}

func TestTagsSizeLimitBoundary(t *testing.T) {
	// The largest names plus a long RPC host still fit; the check must
	// accept what serf accepts.
	p := Peer{Roles: []Role{RoleTask}, Job: strings.Repeat("j", 63), Task: strings.Repeat("t", 128),
		RPCAddr: strings.Repeat("h", 200) + ":65535"}
	tags, err := p.Tags()
	if err != nil {
		t.Fatalf("Tags(): %v", err)
	}
	if n := encodedTagsLen(tags); n > 512 || n < 400 {
		t.Errorf("encoded length %d, want in (400, 512]", n)
	}
}

func TestParseMemberIgnoresForeign(t *testing.T) {
	valid, _ := Peer{Roles: []Role{RoleTask}, Job: "j", Task: "t", RPCAddr: "127.0.0.1:1"}.Tags()
	with := func(k, v string) map[string]string {
		m := maps.Clone(valid)
		if v == "\x00delete" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for name, tags := range map[string]map[string]string{
		"nil tags":               nil,
		"consul member":          {"role": "consul", "dc": "dc1", "port": "8300"},
		"serf role-only":         {"role": "web"},
		"no schema":              with(tagSchema, "\x00delete"),
		"future schema":          with(tagSchema, "2"),
		"no roles":               with(tagRoles, "\x00delete"),
		"empty roles":            with(tagRoles, ""),
		"unknown role":           with(tagRoles, "task,worker"),
		"unsorted roles":         with(tagRoles, "task,assigner"),
		"duplicate roles":        with(tagRoles, "task,task"),
		"trailing comma":         with(tagRoles, "task,"),
		"task without job":       with(tagJob, "\x00delete"),
		"task with bad task":     with(tagTask, "-x"),
		"bad rpc":                with(tagRPC, "nope"),
		"empty rpc":              with(tagRPC, ""),
		"job on assigner":        {tagSchema: "1", tagRoles: "assigner", tagJob: "j"},
		"empty job on assigner":  {tagSchema: "1", tagRoles: "assigner", tagJob: ""},
		"capacity not a number":  with(tagCap, "two"),
		"capacity not canonical": with(tagCap, "2.0"),
		"capacity zero":          with(tagCap, "0"),
		"capacity NaN":           with(tagCap, "NaN"),
		"capacity out of range":  with(tagCap, "1e9"),
		"capacity on assigner":   {tagSchema: "1", tagRoles: "assigner", tagCap: "2"},
		"nohandoff not 1":        with(tagNoState, "yes"),
		"nohandoff on assigner":  {tagSchema: "1", tagRoles: "assigner", tagNoState: "1"},
		"memory not a number":    with(tagMem, "1GB"),
		"memory not canonical":   with(tagMem, "01024"),
		"memory zero":            with(tagMem, "0"),
		"memory negative":        with(tagMem, "-5"),
		"memory out of range":    with(tagMem, "9223372036854775807"),
		"memory on assigner":     {tagSchema: "1", tagRoles: "assigner", tagMem: "1024"},
		"drain not 1":            with(tagDrain, "true"),
		"drain empty":            with(tagDrain, ""),
		"drain on assigner":      {tagSchema: "1", tagRoles: "assigner", tagDrain: "1"},
	} {
		m := serf.Member{Name: "x", Addr: net.ParseIP("10.1.1.1"), Port: 1, Tags: tags, Status: serf.StatusAlive}
		if p, ok := ParseMember(m); ok {
			t.Errorf("%s: ParseMember accepted %v as %+v", name, tags, p)
		}
	}
	// Unknown keys are ignored: a later schema may add tags.
	m := serf.Member{Name: "x", Addr: net.ParseIP("10.1.1.1"), Port: 1, Tags: with("zone", "eu-1"), Status: serf.StatusFailed}
	p, ok := ParseMember(m)
	if !ok || p.Status != StatusFailed || p.GossipAddr != "10.1.1.1:1" {
		t.Errorf("unknown key: ParseMember = %+v, %v", p, ok)
	}
	// A member serf has no status for is not a usable peer.
	m.Status = serf.StatusNone
	if _, ok := ParseMember(m); ok {
		t.Error("ParseMember accepted StatusNone")
	}
}

func TestParseMemberStatuses(t *testing.T) {
	tags, _ := Peer{Roles: []Role{RoleBackup}}.Tags()
	for s, want := range map[serf.MemberStatus]Status{serf.StatusAlive: StatusAlive, serf.StatusLeaving: StatusLeaving,
		serf.StatusLeft: StatusLeft, serf.StatusFailed: StatusFailed} {
		p, ok := ParseMember(serf.Member{Name: "b", Addr: net.ParseIP("::1"), Port: 7, Tags: tags, Status: s})
		if !ok || p.Status != want || p.GossipAddr != "[::1]:7" {
			t.Errorf("%v: got %+v, %v", s, p, ok)
		}
	}
}

func peersEqual(a, b Peer) bool {
	return a.Name == b.Name && slices.Equal(a.Roles, b.Roles) && a.Job == b.Job && a.Task == b.Task &&
		a.RPCAddr == b.RPCAddr && a.GossipAddr == b.GossipAddr && a.Status == b.Status && a.Capacity == b.Capacity &&
		a.MemoryLimit == b.MemoryLimit && a.Draining == b.Draining && a.Settling == b.Settling && a.HandoffAddr == b.HandoffAddr && a.NoHandoff == b.NoHandoff
}

// FuzzParseTags checks that parsing arbitrary tag maps never panics and
// that whatever parses re-encodes to the same known tags.
func FuzzParseTags(f *testing.F) {
	f.Add(uint8(0x1f), "1", "task", "kv", "kv-0", "127.0.0.1:9000", "", "")
	f.Add(uint8(0x13), "1", "assigner,backup,distributor", "", "", "10.0.0.1:7070", "zone", "a")
	f.Add(uint8(0x03), "1", "backup", "", "", "", "", "")
	f.Add(uint8(0x1f), "1", "task,assigner", "j", "t", ":1", "", "")
	f.Add(uint8(0x07), "2", "task", "J", "t", "h:0", "", "")
	f.Add(uint8(0xff), "1", "distributor", "", "", "[::1]:80", "roles", "x")
	f.Add(uint8(0x3f), "1", "task", "kv", "kv-0", "127.0.0.1:9000", "cap", "2.5")
	f.Add(uint8(0x3f), "1", "task", "kv", "kv-0", "127.0.0.1:9000", "cap", "2.50")
	f.Add(uint8(0x3f), "1", "task", "kv", "kv-0", "127.0.0.1:9000", "mem", "1073741824")
	f.Add(uint8(0x3f), "1", "task", "kv", "kv-0", "127.0.0.1:9000", "mem", "+1")
	f.Add(uint8(0x3f), "1", "task", "kv", "kv-0", "127.0.0.1:9000", "drain", "1")
	f.Add(uint8(0x23), "1", "assigner", "", "", "", "settling", "1")
	f.Add(uint8(0x23), "1", "assigner", "", "", "", "settling", "0")
	f.Fuzz(func(t *testing.T, present uint8, schema, roles, job, task, rpc, extraK, extraV string) {
		tags := map[string]string{}
		for i, kv := range [][2]string{{tagSchema, schema}, {tagRoles, roles}, {tagJob, job}, {tagTask, task}, {tagRPC, rpc}, {extraK, extraV}} {
			if present&(1<<i) != 0 {
				tags[kv[0]] = kv[1]
			}
		}
		p, err := parseTags(tags)
		if err != nil {
			return
		}
		again, err := p.Tags()
		if err != nil {
			t.Fatalf("parsed %v into %+v, which does not re-encode: %v", tags, p, err)
		}
		known := maps.Clone(tags)
		maps.DeleteFunc(known, func(k, _ string) bool {
			return k != tagSchema && k != tagRoles && k != tagJob && k != tagTask && k != tagRPC && k != tagCap && k != tagMem && k != tagDrain && k != tagSettle
		})
		if !maps.Equal(again, known) {
			t.Fatalf("re-encoding differs\n  in %v\n out %v", known, again)
		}
	})
}

func BenchmarkParseMember(b *testing.B) {
	tags, err := Peer{Roles: []Role{RoleTask}, Job: "kvcache", Task: "kvcache-17", RPCAddr: "10.1.2.3:9000"}.Tags()
	if err != nil {
		b.Fatal(err)
	}
	m := serf.Member{Name: "kvcache-17", Addr: net.ParseIP("10.1.2.3"), Port: 7946, Tags: tags, Status: serf.StatusAlive}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseMember(m); !ok {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkPeerTags(b *testing.B) {
	p := Peer{Roles: []Role{RoleTask}, Job: "kvcache", Task: "kvcache-17", RPCAddr: "10.1.2.3:9000"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Tags(); err != nil {
			b.Fatal(err)
		}
	}
}
