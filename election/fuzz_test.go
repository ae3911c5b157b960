package election

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leader-elector/leader-elector/leadership"
)

// FuzzTracker feeds one tracker an arbitrary sequence of Lease records (nil
// and negative fields, MaxInt32, extreme times), writes, deletions, object
// metadata and clock steps, and checks after every step what the app relies
// on: the published fencing token never goes back, this pod never claims
// leadership at or after its deadline, and a new term's token is above every
// token seen and fits the Lease's int32 field.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 20, 2, 5, 6, 1})
	f.Add([]byte{1, 0x7f, 0xff, 0xff, 0xff, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 6, 0})
	f.Add([]byte{5, 5, 5, 0, 2, 0, 0, 0, 1, 3, 0x80, 0, 0, 0, 0, 0, 0, 0, 6, 1, 6, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tr, clk := newTestTracker(t)
		in := fuzzInput(ops)
		var published int64
		for step := 0; step < 64 && len(in) > 0; step++ {
			switch in.byte() % 7 {
			case 0: // a record from the API server
				tr.observeRead(in.record())
			case 1: // our own write, as the lock makes it: a renewal of our
				// current term, or a new term with newTermToken's token
				r := in.record()
				r.holder = testIdentity
				if own, ok := tr.currentOwnTerm(); ok && in.byte()%2 == 0 {
					r.transitions = own
				} else if token, err := tr.newTermToken(r.transitions, true); err == nil {
					r.transitions = token
				} else {
					break
				}
				tr.observeWrite(clk.Now(), r)
			case 2:
				tr.observeDeleted()
			case 3: // the object's creation and the server's Date, arbitrary
				tr.observeObject(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(in.time())}})
				tr.server.ObserveDate(in.time())
			case 4: // time passes (up to two days)
				clk.Step(time.Duration(in.uint32()%(48*3600*1000)) * time.Millisecond)
			case 5:
				tr.setClaiming(in.byte()%2 == 0, leadership.ReasonReleased)
			case 6:
				highest := tr.Snapshot().FencingToken
				if own, ok := tr.currentOwnTerm(); ok && own < highest {
					t.Fatalf("step %d: would continue its own term with token %d below the highest seen %d", step, own, highest)
				}
				token, err := tr.newTermToken(int64(in.uint32()), in.byte()%2 == 0)
				if err == nil && (token <= highest || token > math.MaxInt32) {
					t.Fatalf("step %d: new term token %d; highest seen %d, limit %d", step, token, highest, math.MaxInt32)
				}
			}
			s := tr.Snapshot()
			if s.FencingToken < published {
				t.Fatalf("step %d: published token went back from %d to %d", step, published, s.FencingToken)
			}
			published = s.FencingToken
			if s.IsLeader && !clk.Now().Before(s.Deadline) {
				t.Fatalf("step %d: claims leadership at %v, its deadline is %v", step, clk.Now(), s.Deadline)
			}
			// The leader's token is its own term's, the one in the Lease.
			if own, _ := tr.ownTerm(); s.IsLeader && s.FencingToken != own {
				t.Fatalf("step %d: leads publishing token %d, its term's token is %d", step, s.FencingToken, own)
			}
		}
	})
}

// fuzzInput hands out the fuzzer's bytes as values; once they run out,
// zeros.
type fuzzInput []byte

func (in *fuzzInput) byte() byte {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return b
}

func (in *fuzzInput) uint32() uint32 {
	var b [4]byte
	for i := range b {
		b[i] = in.byte()
	}
	return binary.BigEndian.Uint32(b[:])
}

func (in *fuzzInput) int64() int64 {
	return int64(uint64(in.uint32())<<32 | uint64(in.uint32()))
}

// time returns t0 moved by up to ±68 years, in seconds.
func (in *fuzzInput) time() time.Time {
	return t0.Add(time.Duration(int32(in.uint32())) * time.Second)
}

func (in *fuzzInput) record() record {
	holders := []string{"", testIdentity, "pod-b", unknownHolder}
	r := record{
		holder:          holders[in.byte()%byte(len(holders))],
		transitions:     in.int64() >> (in.byte() % 64),
		durationSeconds: int32(in.uint32()),
	}
	if in.byte()%2 == 0 {
		r.renewTime = in.time()
	}
	return r
}
