package filelease

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// pollPeriod is how often the store is read besides inotify's
// notifications: it catches what inotify cannot report (a file system
// without it, a directory replaced), at the cost of one small read.
const pollPeriod = time.Second

// follow reads the store whenever its files change, so that the watches
// see another process's writes at once (a graceful handover is then as
// fast as on Kubernetes), until ctx ends.
func (s *Server) follow(ctx context.Context) {
	changed := make(chan struct{}, 1)
	if err := s.notifyChanges(ctx, changed); err != nil {
		s.logger.Info("No inotify for the lease file; reading it every poll period instead", "err", err, "pollPeriod", pollPeriod)
	}
	ticker := time.NewTicker(pollPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ticker.C:
		}
		_, _ = s.refresh(ctx)
	}
}

// notifyChanges signals changed whenever the records file is replaced,
// written, deleted or changes permissions, by inotify on its directory (a
// rename replaces the file, so the file itself cannot be watched). Not the
// high-water mark: a write renames it into place just before the records,
// and a notice then woke every follower in the middle of the write, to
// read a write half done and wait for the lock, while the writer on a
// 2-core machine waited for a CPU: a graceful handover's median fell from
// 10-12 ms to 8-10 ms without it (docs/performance.md). A change of the
// mark alone (a writer killed between the two renames, a mark deleted by
// hand) changes no Lease, and the next read, at the latest pollPeriod
// later, sees it.
func (s *Server) notifyChanges(ctx context.Context, changed chan<- struct{}) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return err
	}
	const mask = unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE | unix.IN_DELETE | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_MODIFY
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(s.store.path), mask); err != nil {
		unix.Close(fd)
		return err
	}
	// A non-blocking descriptor in an os.File reads through the runtime's
	// poller, so that Close ends a pending Read.
	f := os.NewFile(uintptr(fd), "inotify")
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	names := map[string]bool{filepath.Base(s.store.path): true}
	go func() {
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					s.logger.Error(err, "Stopped following the lease file by inotify; reading it every poll period", "pollPeriod", pollPeriod)
				}
				return
			}
			if concerns(buf[:n], names) {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return nil
}

// concerns reports whether one of the inotify events in buf names one of
// names, or the queue overflowed (which names nothing, and may have lost
// one that did).
func concerns(buf []byte, names map[string]bool) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		// The header is unix.InotifyEvent: wd, mask, cookie, len, in the
		// machine's byte order.
		mask := binary.NativeEndian.Uint32(buf[4:8])
		end := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:16]))
		if mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		if end > len(buf) {
			return false
		}
		if names[string(trimNUL(buf[unix.SizeofInotifyEvent:end]))] {
			return true
		}
		buf = buf[end:]
	}
	return false
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
