package election

import (
	"errors"
	"fmt"
)

// AnyTerm, given as the token of ReleaseTerm and ReleaseTermFor, releases
// whichever term this pod leads in (Release).
const AnyTerm int64 = -1

// ErrOtherTerm is returned by ReleaseTerm when this pod leads, but in
// another term than the one given: a request left over from an earlier
// term must not end the current one.
var ErrOtherTerm = errors.New("this pod leads in another term than the one given")

// stopClaimingTerm stops claiming leadership for reason (setClaiming(false))
// if this pod leads now, in the term token unless token is AnyTerm. The
// check and the stop are made under one lock: no term can begin between
// them. It returns ErrNotLeader or an ErrOtherTerm and changes nothing
// otherwise.
func (t *tracker) stopClaimingTerm(token int64, reason Reason) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	v := t.viewLocked(now)
	if !v.isLeader {
		return ErrNotLeader
	}
	if token != AnyTerm && v.token != token {
		return fmt.Errorf("%w (current %d, given %d)", ErrOtherTerm, v.token, token)
	}
	t.stopCauseLocked(now, reason)
	t.claiming = false
	t.publishLocked(now)
	return nil
}
