package node_test

import (
	"context"
	"testing"
	"time"
)

func TestDeployExample(t *testing.T) {
	d := deployExample(t)
	leader := d.waitSettled(t, 2*time.Minute)
	url, err := d.serviceURL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		got, err := ask(context.Background(), url)
		if err != nil || got != leader {
			t.Fatalf("service answered %q (%v), want the leader %s", got, err, leader)
		}
	}
	t.Logf("leader %s answers the service", leader)
}
