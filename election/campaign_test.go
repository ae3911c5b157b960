package election

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestCampaignAdmits: auto admits always, never never, manual only while
// an Acquire asks.
func TestCampaignAdmits(t *testing.T) {
	if !newCampaign(CampaignAuto).Admits() || !newCampaign("").Admits() {
		t.Error("auto does not admit")
	}
	if newCampaign(CampaignNever).Admits() {
		t.Error("an observer admits")
	}
	if _, ok := newCampaign(CampaignNever).Admit(); ok {
		t.Error("an observer admitted a term")
	}
	c := newCampaign(CampaignManual)
	if c.Admits() {
		t.Error("manual admits before anyone asks")
	}
	c.ask()
	c.ask()
	if !c.Admits() {
		t.Error("manual does not admit while asked")
	}
	c.stopAsking()
	if !c.Admits() {
		t.Error("manual stopped admitting while a second call still asks")
	}
	c.stopAsking()
	if c.Admits() {
		t.Error("manual admits after every call stopped asking")
	}
	var nilCampaign *campaign
	if done, ok := nilCampaign.Admit(); !ok || !nilCampaign.Admits() {
		t.Error("a nil campaign does not admit")
	} else {
		done()
	}
}

// TestCampaignStopAskingWaitsForWrites: an Acquire that gives up waits for
// the writes its campaign admitted, so that it answers their outcome.
func TestCampaignStopAskingWaitsForWrites(t *testing.T) {
	c := newCampaign(CampaignManual)
	c.ask()
	done, ok := c.Admit()
	if !ok {
		t.Fatal("not admitted while asked")
	}
	stopped := make(chan struct{})
	go func() {
		c.stopAsking()
		close(stopped)
	}()
	// stopAsking closes the campaign at once, then waits.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !c.Admits(), nil
	}); err != nil {
		t.Fatal("the campaign still admits after the call stopped asking")
	}
	select {
	case <-stopped:
		t.Fatal("stopAsking returned while an admitted write was on its way")
	default:
	}
	done()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stopAsking did not return after the write")
	}
}
