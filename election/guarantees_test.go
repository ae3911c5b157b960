package election

import (
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/leasetimings"
)

func TestGuarantees(t *testing.T) {
	g := Config{LeaseSpec: LeaseSpec{Timings: leasetimings.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}}}.Guarantees()
	want := Guarantees{CrashTakeover: 19400 * time.Millisecond, ClockDriftMargin: 1.0 / 3, APIOutageSurvived: 8 * time.Second}
	if g.CrashTakeover != want.CrashTakeover || g.APIOutageSurvived != want.APIOutageSurvived || g.ClockDriftMargin-want.ClockDriftMargin > 1e-9 || want.ClockDriftMargin-g.ClockDriftMargin > 1e-9 {
		t.Errorf("Guarantees() = %+v, want %+v", g, want)
	}
}
