package assign

import "testing"

func TestChurn(t *testing.T) {
	quarter := KeySpaceEnd / 4
	base := &Assignment{Job: "demo", Generation: 1, Tasks: namedTasks("a", "b", "c"), Slices: []Slice{
		{0, half, []string{"a"}},
		{half, KeySpaceEnd, []string{"b", "c"}},
	}}
	for _, tt := range []struct {
		name   string
		slices []Slice
		want   float64
	}{
		{"same", base.Slices, 0},
		{"split, same tasks", []Slice{{0, quarter, []string{"a"}}, {quarter, half, []string{"a"}}, {half, KeySpaceEnd, []string{"b", "c"}}}, 0},
		{"replica removed", []Slice{{0, half, []string{"a"}}, {half, KeySpaceEnd, []string{"c"}}}, 0},
		{"replica added", []Slice{{0, half, []string{"a", "b"}}, {half, KeySpaceEnd, []string{"b", "c"}}}, 0.5},
		{"quarter moved", []Slice{{0, quarter, []string{"c"}}, {quarter, KeySpaceEnd, []string{"a"}}}, 0.25 + 0.5},
		{"swap", []Slice{{0, half, []string{"b", "c"}}, {half, KeySpaceEnd, []string{"a"}}}, 1},
		{"unaligned", []Slice{{0, quarter * 3, []string{"a"}}, {quarter * 3, KeySpaceEnd, []string{"b", "c"}}}, 0.25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next := &Assignment{Job: "demo", Generation: 2, Tasks: base.Tasks, Slices: tt.slices}
			if err := next.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := Churn(base, next); got != tt.want {
				t.Errorf("Churn = %v, want %v", got, tt.want)
			}
		})
	}
	if Churn(nil, base) != 1 || Churn(base, nil) != 0 {
		t.Error("Churn with nil: want 1 from nothing, 0 to nothing")
	}
}

func TestEqual(t *testing.T) {
	a := twoSlices()
	b := a.Clone()
	b.Generation = 9
	if !Equal(a, b) {
		t.Error("Equal must ignore the generation")
	}
	b.Tasks[1].Addr = "elsewhere:1"
	if Equal(a, b) {
		t.Error("Equal must compare addresses")
	}
	c := a.Clone()
	c.Slices[1].Tasks = []string{"b"}
	if Equal(a, c) {
		t.Error("Equal must compare slice tasks")
	}
	c = a.Clone()
	c.Job = "other"
	if Equal(a, c) || Equal(a, nil) || !Equal(nil, nil) {
		t.Error("Equal: wrong answer for job or nil")
	}
}
