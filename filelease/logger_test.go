package filelease

import (
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func testLogger(t *testing.T) klog.Logger { return ktesting.NewLogger(t, ktesting.NewConfig()) }
