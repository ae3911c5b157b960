package partition

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		n, m, lo, hi int
	}{
		{16, 1, 16, 16},
		{16, 4, 4, 4},
		{16, 5, 3, 4},
		{16, 3, 5, 6},
		{16, 17, 0, 1},
		{64, 7, 9, 10},
		{64, 8, 8, 8},
		{1, 2, 0, 1},
		{16, 0, 0, 16},
	} {
		t.Run(fmt.Sprintf("%d over %d", tc.n, tc.m), func(t *testing.T) {
			if lo, hi := FairShare(tc.n, tc.m); lo != tc.lo || hi != tc.hi {
				t.Errorf("FairShare(%d, %d) = %d, %d; want %d, %d", tc.n, tc.m, lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		members []string
		owned   map[string]int
		want    map[string]int
	}{
		{
			name: "one member takes everything", n: 16, members: []string{"a"},
			want: map[string]int{"a": 16},
		},
		{
			name: "even split", n: 16, members: []string{"a", "b", "c", "d"}, owned: map[string]int{"a": 16},
			want: map[string]int{"a": 4, "b": 4, "c": 4, "d": 4},
		},
		{
			name: "the member that owns most keeps the larger share", n: 16, members: []string{"a", "b", "c", "d", "e"},
			owned: map[string]int{"a": 4, "b": 4, "c": 4, "d": 4},
			want:  map[string]int{"a": 4, "b": 3, "c": 3, "d": 3, "e": 3},
		},
		{
			name: "ties go by identity, whatever the order of members", n: 16, members: []string{"e", "d", "c", "b", "a"},
			owned: map[string]int{"d": 4, "b": 4},
			want:  map[string]int{"b": 4, "d": 3, "a": 3, "c": 3, "e": 3},
		},
		{
			name: "a stable fair assignment is its own target: nothing moves", n: 16, members: []string{"a", "b", "c", "d", "e"},
			owned: map[string]int{"a": 3, "b": 3, "c": 4, "d": 3, "e": 3},
			want:  map[string]int{"a": 3, "b": 3, "c": 4, "d": 3, "e": 3},
		},
		{
			name: "a crashed member's partitions go to the survivors", n: 64, members: []string{"a", "b", "c", "d", "e", "f", "g"},
			owned: map[string]int{"a": 8, "b": 8, "c": 8, "d": 8, "e": 8, "f": 8, "g": 8},
			want:  map[string]int{"a": 10, "b": 9, "c": 9, "d": 9, "e": 9, "f": 9, "g": 9},
		},
		{
			name: "more members than partitions", n: 2, members: []string{"a", "b", "c"}, owned: map[string]int{"c": 1},
			want: map[string]int{"c": 1, "a": 1, "b": 0},
		},
		{
			name: "no members", n: 4,
			want: map[string]int{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Targets(tc.n, tc.members, tc.owned)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Targets = %v, want %v", got, tc.want)
			}
			sum := 0
			for _, v := range got {
				sum += v
			}
			if len(tc.members) > 0 && sum != tc.n {
				t.Errorf("targets add up to %d, want %d", sum, tc.n)
			}
		})
	}
}

func TestFair(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		members []string
		owners  []string
		want    bool
	}{
		{"all owned, even", 4, []string{"a", "b"}, []string{"a", "b", "a", "b"}, true},
		{"all owned, within one", 5, []string{"a", "b"}, []string{"a", "b", "a", "b", "b"}, true},
		{"a free partition", 4, []string{"a", "b"}, []string{"a", "b", "", "b"}, false},
		{"an imbalance of two", 4, []string{"a", "b"}, []string{"a", "a", "a", "b"}, false},
		{"owned by a pod that is no member", 2, []string{"a"}, []string{"a", "gone"}, false},
		{"no members", 1, nil, []string{""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Fair(tc.n, tc.members, tc.owners); got != tc.want {
				t.Errorf("Fair = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestToRelease(t *testing.T) {
	for _, tc := range []struct {
		own  []int
		want int
		ok   bool
	}{
		{nil, 0, false},
		{[]int{3}, 3, true},
		{[]int{0, 7, 2}, 7, true},
	} {
		if got, ok := ToRelease(tc.own); got != tc.want || ok != tc.ok {
			t.Errorf("ToRelease(%v) = %d, %t; want %d, %t", tc.own, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFreeToTry(t *testing.T) {
	owners := []string{"a", "", "b", "", "", "c"}
	for _, tc := range []struct {
		name         string
		want, offset int
		out          []int
	}{
		{"from the start", 2, 0, []int{1, 3}},
		{"from an offset, going round", 2, 4, []int{4, 1}},
		{"more wanted than free", 5, 0, []int{1, 3, 4}},
		{"none wanted", 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			always := func(int) bool { return true }
			if got := FreeToTry(owners, tc.want, "d", nil, tc.offset, always); !reflect.DeepEqual(got, tc.out) {
				t.Errorf("FreeToTry(%d, %d) = %v, want %v", tc.want, tc.offset, got, tc.out)
			}
		})
	}
}

// TestRebalanceConverges plays the rules the members follow — take free
// partitions while below target, hand the highest surplus partition over
// while above — one step at a time from many starting points, and checks
// that the group ends full and fair without moving a partition back and
// forth, and that a fair assignment moves nothing.
func TestRebalanceConverges(t *testing.T) {
	// Both ways of picking a free partition converge: from the member's
	// offset (every free partition long free, no preferences), and from its
	// preferred share (FreeToTry) with no
	// partition ever long free, so that only the needy set shrinking
	// hands a member the partitions preferred by others.
	for _, picker := range []struct {
		name string
		pick func(owners []string, who string, needy []string, n int) []int
	}{
		{"offset", func(owners []string, who string, _ []string, n int) []int {
			return FreeToTry(owners, 1, who, nil, startOffset(who, n), func(int) bool { return true })
		}},
		{"preferred", func(owners []string, who string, needy []string, n int) []int {
			return FreeToTry(owners, 1, who, needy, startOffset(who, n), func(int) bool { return false })
		}},
	} {
		t.Run(picker.name, func(t *testing.T) { testRebalanceConverges(t, picker.pick) })
	}
}

// needyOf lists the members below their targets, as the member's view
// does.
func needyOf(members []string, counts, targets map[string]int) []string {
	var needy []string
	for _, who := range slices.Sorted(slices.Values(members)) {
		if counts[who] < targets[who] {
			needy = append(needy, who)
		}
	}
	return needy
}

func testRebalanceConverges(t *testing.T, pick func(owners []string, who string, needy []string, n int) []int) {
	for _, tc := range []struct {
		name    string
		n       int
		members []string
		owners  []string // "" free; a name not among members is gone
	}{
		{"first member", 16, []string{"a"}, make([]string, 16)},
		{"1 → 4", 16, []string{"a", "b", "c", "d"}, repeat("a", 16)},
		{"4 → 5", 16, []string{"a", "b", "c", "d", "e"}, cycle(16, "a", "b", "c", "d")},
		{"5 → 4 after a crash", 16, []string{"a", "b", "c", "d"}, cycle(16, "a", "b", "c", "d", "")},
		{"7 → 8", 64, []string{"a", "b", "c", "d", "e", "f", "g", "h"}, cycle(64, "a", "b", "c", "d", "e", "f", "g")},
		{"8 → 7 after a crash", 64, []string{"a", "b", "c", "d", "e", "f", "g"}, cycle(64, "a", "b", "c", "d", "e", "f", "g", "")},
		{"already fair", 16, []string{"a", "b", "c", "d", "e"}, cycle(16, "a", "b", "c", "d", "e")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owners := append([]string(nil), tc.owners...)
			moves := map[int]int{}
			wasFair := Fair(tc.n, tc.members, owners)
			for step := 0; step < 10*tc.n && !Fair(tc.n, tc.members, owners); step++ {
				changed := false
				for _, who := range tc.members {
					counts := map[string]int{}
					var mine []int
					for i, o := range owners {
						counts[o]++
						if o == who {
							mine = append(mine, i)
						}
					}
					targets := Targets(tc.n, tc.members, counts)
					target := targets[who]
					switch {
					case len(mine) < target:
						if free := pick(owners, who, needyOf(tc.members, counts, targets), tc.n); len(free) == 1 {
							owners[free[0]] = who
							changed = true
						}
					case len(mine) > target:
						p, _ := ToRelease(mine)
						owners[p] = ""
						moves[p]++
						changed = true
					}
				}
				if !changed {
					t.Fatalf("stuck, not fair: %v", owners)
				}
			}
			if !Fair(tc.n, tc.members, owners) {
				t.Fatalf("not fair after %d steps: %v", 10*tc.n, owners)
			}
			for p, k := range moves {
				if k > 1 {
					t.Errorf("partition %d was handed over %d times", p, k)
				}
			}
			if wasFair && len(moves) > 0 {
				t.Errorf("a fair assignment moved %d partitions", len(moves))
			}
		})
	}
}

// TestFreeToTryPreferred: members below their targets that look at the same
// free partitions try disjoint ones, which together cover every free
// partition, about evenly; a member tries another's preferred partition
// only once it has been free for a while; a member that is not needy tries
// only those.
func TestFreeToTryPreferred(t *testing.T) {
	const n = 1024
	owners := make([]string, n)
	for i := range 256 {
		owners[i] = "pm-0" // the member that drained the rest
	}
	needy := []string{"pm-1", "pm-2", "pm-3"}
	never := func(int) bool { return false }
	seen := map[int]string{}
	for _, who := range needy {
		got := FreeToTry(owners, n, who, needy, startOffset(who, n), never)
		// Rendezvous hashing: binomial, 256 ± 3 standard deviations (13).
		if len(got) < 256-40 || len(got) > 256+40 {
			t.Errorf("%s prefers %d of the 768 free partitions, want about 256", who, len(got))
		}
		for _, i := range got {
			if owners[i] != "" {
				t.Errorf("%s would try partition %d, held by %s", who, i, owners[i])
			}
			if other, dup := seen[i]; dup {
				t.Errorf("partition %d preferred by both %s and %s", i, other, who)
			}
			seen[i] = who
			if p := preferredTaker(i, needy); p != who {
				t.Errorf("partition %d: preferredTaker = %s, tried by %s", i, p, who)
			}
		}
	}
	if len(seen) != 768 {
		t.Errorf("the needy members prefer %d of the 768 free partitions together, want all", len(seen))
	}
	// Wanting fewer takes the first of its own, going round from offset.
	if got := FreeToTry(owners, 3, "pm-1", needy, 1000, never); len(got) != 3 || got[0] < 1000 {
		t.Errorf("3 wanted from offset 1000: %v", got)
	}
	// Another's partitions, once long free, come after its own.
	longFree := func(i int) bool { return i%2 == 0 }
	got := FreeToTry(owners, n, "pm-1", needy, 0, longFree)
	own := FreeToTry(owners, n, "pm-1", needy, 0, never)
	if !slices.Equal(got[:len(own)], own) {
		t.Errorf("its own preferred partitions do not come first")
	}
	for _, i := range got[len(own):] {
		if i%2 != 0 || preferredTaker(i, needy) == "pm-1" {
			t.Errorf("partition %d tried as another's long-free partition", i)
		}
	}
	if len(got) == len(own) {
		t.Errorf("no long-free partition of another member tried")
	}
	// Not needy (the view counts it at its target): long free ones only.
	for _, i := range FreeToTry(owners, 10, "pm-9", needy, 0, longFree) {
		if i%2 != 0 {
			t.Errorf("a member that is not needy tries partition %d, not long free", i)
		}
	}
	if got := FreeToTry(owners, 0, "pm-1", needy, 0, longFree); got != nil {
		t.Errorf("none wanted: %v", got)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func cycle(n int, names ...string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = names[i%len(names)]
	}
	return out
}

func TestToHandOver(t *testing.T) {
	for _, tc := range []struct {
		own  []int
		n    int
		want []int
	}{
		{[]int{5, 1, 9, 3}, 2, []int{5, 9}},
		{[]int{5, 1, 9, 3}, 1, []int{9}},
		{[]int{2}, 3, []int{2}},
		{nil, 1, []int{}},
	} {
		if got := ToHandOver(tc.own, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("ToHandOver(%v, %d) = %v, want %v", tc.own, tc.n, got, tc.want)
		}
	}
}

func TestEffectiveN(t *testing.T) {
	for _, tc := range []struct {
		name      string
		own       int
		published []string
		want      int
	}{
		{"alone", 16, nil, 16},
		{"all agree", 16, []string{"16", "16"}, 16},
		{"a member with a smaller N", 32, []string{"32", "8"}, 8},
		{"this pod's own N is the smallest", 8, []string{"32", "32"}, 8},
		{"a member of an older version publishes none", 16, []string{"", "32"}, 16},
		{"values that are not an N are ignored", 16, []string{"0", "-4", "1025", "8x", " 8", "eight"}, 16},
		{"the smallest valid one wins", 1024, []string{"1024", "1", "2"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EffectiveN(tc.own, tc.published); got != tc.want {
				t.Errorf("EffectiveN(%d, %q) = %d, want %d", tc.own, tc.published, got, tc.want)
			}
		})
	}
}

func TestSurplus(t *testing.T) {
	for _, tc := range []struct {
		name              string
		own               []int
		effective, target int
		want              []int
	}{
		{"at the target, all in range", []int{0, 1, 2, 3}, 16, 4, nil},
		{"above the target: the highest go", []int{3, 0, 2, 1}, 16, 2, []int{2, 3}},
		{"beyond the effective N: all go, whatever the target", []int{16, 17, 18, 19}, 8, 2, []int{16, 17, 18, 19}},
		{"both: the excess below, then all beyond", []int{0, 1, 2, 9, 12}, 8, 2, []int{2, 9, 12}},
		{"below the target in range, some beyond", []int{0, 20}, 8, 4, []int{20}},
		{"nothing owned", nil, 8, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Surplus(tc.own, tc.effective, tc.target); !slices.Equal(got, tc.want) {
				t.Errorf("Surplus(%v, %d, %d) = %v, want %v", tc.own, tc.effective, tc.target, got, tc.want)
			}
		})
	}
}

// TestMixedCountsConverge plays a group whose members disagree on N (a
// rolling update of --partitions) with the rules every member follows: each
// computes the effective N from the others' published N, targets over the
// partitions below it, takes free ones below it while under its target and
// hands over its Surplus. The group reaches a full and fair assignment of the
// effective N, with nothing beyond it owned, so that every member — those
// with the new N too — owns its share while the old ones still run.
func TestMixedCountsConverge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      map[string]int // each member's own N
		owners []string       // of max N partitions; "" free
		want   int            // the effective N
	}{
		{"32 → 8: the old pods give up 8..31 and share 0..7", map[string]int{"a": 32, "b": 32, "c": 8, "d": 8}, cycle(32, "a", "b"), 8},
		{"16 → 32: the group works on 0..15 until the old pods leave", map[string]int{"a": 16, "b": 16, "c": 32, "d": 32}, append(cycle(16, "a", "b"), make([]string, 16)...), 16},
		{"one new pod at 8 among three at 32", map[string]int{"a": 32, "b": 32, "c": 32, "d": 8}, cycle(32, "a", "b", "c"), 8},
		{"an old pod that publishes no N counts as a member", map[string]int{"a": 16, "b": 16, "c": 0}, cycle(16, "a", "b", "c"), 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			members := slices.Sorted(maps.Keys(tc.n))
			owners := append([]string(nil), tc.owners...)
			effective := func(who string) int {
				var published []string
				for _, other := range members {
					if other != who && tc.n[other] > 0 {
						published = append(published, strconv.Itoa(tc.n[other]))
					}
				}
				own := tc.n[who]
				if own == 0 {
					// An older version: its N is the group's, unpublished.
					own = tc.want
				}
				return EffectiveN(own, published)
			}
			for _, who := range members {
				if got := effective(who); got != tc.want {
					t.Fatalf("%s: effective N %d, want %d", who, got, tc.want)
				}
			}
			done := func() bool {
				for _, o := range owners[tc.want:] {
					if o != "" {
						return false
					}
				}
				return Fair(tc.want, members, owners[:tc.want])
			}
			for step := 0; step < 10*len(owners) && !done(); step++ {
				changed := false
				for _, who := range members {
					e := effective(who)
					counts := map[string]int{}
					var mine, inRange []int
					for i, o := range owners {
						if i < e {
							counts[o]++
						}
						if o == who {
							mine = append(mine, i)
							if i < e {
								inRange = append(inRange, i)
							}
						}
					}
					target := Targets(e, members, counts)[who]
					if surplus := Surplus(mine, e, target); len(surplus) > 0 {
						owners[surplus[len(surplus)-1]] = ""
						changed = true
					} else if len(inRange) < target {
						if free := FreeToTry(owners[:e], 1, who, nil, startOffset(who, e), func(int) bool { return true }); len(free) == 1 {
							owners[free[0]] = who
							changed = true
						}
					}
				}
				if !changed {
					t.Fatalf("stuck: %v", owners)
				}
			}
			if !done() {
				t.Fatalf("no full and fair assignment of %d with nothing beyond: %v", tc.want, owners)
			}
		})
	}
}
