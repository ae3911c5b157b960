package exactlyonce

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// SourcePath is partition i's stream in dir: an append-only file, one item
// per line; the item on line n has offset n (the first is 1). The worker
// only reads it: someone else appends.
func SourcePath(dir string, partition int) string {
	return filepath.Join(dir, "p"+strconv.Itoa(partition))
}

// sourceReader reads one partition's stream in order.
type sourceReader struct {
	f       *os.File
	r       *bufio.Reader
	partial []byte
	offset  int64 // of the last item returned
	poll    time.Duration
}

// openSource opens partition's stream positioned after the item at offset
// after (0: at the start).
func openSource(dir string, partition int, after int64, poll time.Duration) (*sourceReader, error) {
	f, err := os.Open(SourcePath(dir, partition))
	if err != nil {
		return nil, err
	}
	s := &sourceReader{f: f, r: bufio.NewReader(f), poll: poll}
	for s.offset < after {
		if _, err := s.next(context.Background(), false); err != nil {
			f.Close()
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("partition %d: the checkpoint's offset %d is beyond the stream (%d items)", partition, after, s.offset)
			}
			return nil, err
		}
	}
	return s, nil
}

// next returns the next item, waiting for it to be appended (polling the
// file: a plain file has no change notification in the standard library)
// until ctx ends; without wait it returns io.EOF at the end.
func (s *sourceReader) next(ctx context.Context, wait bool) (string, error) {
	for {
		chunk, err := s.r.ReadBytes('\n')
		s.partial = append(s.partial, chunk...)
		if err == nil {
			item := string(bytes.TrimSuffix(s.partial, []byte("\n")))
			s.partial = s.partial[:0]
			s.offset++
			return item, nil
		}
		if !errors.Is(err, io.EOF) {
			return "", err
		}
		// At the end, perhaps inside a line being appended: wait for more.
		if !wait {
			return "", io.EOF
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

func (s *sourceReader) Close() error { return s.f.Close() }
