package election

import (
	"fmt"

	"github.com/leader-elector/leader-elector/leadership"
)

// stopClaimingTerm stops claiming leadership for reason (setClaiming(false))
// if this pod leads now, in the term token unless token is AnyTerm. The
// check and the stop are made under one lock: no term can begin between
// them. It returns ErrNotLeader or an ErrOtherTerm and changes nothing
// otherwise.
func (t *tracker) stopClaimingTerm(token int64, reason leadership.Reason) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	v := t.viewLocked(now)
	if !v.isLeader {
		return leadership.ErrNotLeader
	}
	if token != leadership.AnyTerm && v.token != token {
		return fmt.Errorf("%w (current %d, given %d)", leadership.ErrOtherTerm, v.token, token)
	}
	t.stopCauseLocked(now, reason)
	t.claiming = false
	t.publishLocked(now)
	return nil
}
